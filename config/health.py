"""``GET /health``: each part of this deployment with its verdict (``status``) and why it is
checked (``why``): the database, the coordination cache (Redis), the Celery broker, and the
checks the apps register (the MQTT bridge's slots, from ``devices``). Every check is guarded:
one that raises (its server is down) is reported as that check's failure, so the answer is
always this JSON, never a 500 page.

The rule (``RULE``, in every answer too): the servers the web process uses always count. A
process that runs beside it counts only where this deployment runs that process
(``DEPLOYMENT_PROCESSES``, from the settings): the MQTT bridge when ``MQTT_URL`` names a
broker, since devices reach the product only through a bridge there. On the embedded default
the embedded broker and its bridge live inside the process that starts them (``make demo``,
``manage.py mqtt_bridge``), never beside the web server: the bridge is reported ``not running
here`` with what its check found, and neither turns the answer into a 503 nor makes Django
log one as an error. A failing part that counts answers 503, as before."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.conf import settings
from django.core.cache import caches
from django.db import connection
from django.http import HttpRequest, JsonResponse
from django.utils import timezone
from django.views.decorators.cache import never_cache

from config.env import credentials_masked

logger = logging.getLogger(__name__)

BROKER_TIMEOUT_S = 2
ERROR_MAX_CHARS = 200
CACHE_PROBE_KEY = "health:probe"

OK, FAILING, NOT_HERE = "ok", "failing", "not running here"
RULE = (
    "503 when a part this deployment runs fails. The servers the web process uses always "
    "count; a process beside it counts where this deployment runs it (the MQTT bridge: when "
    "MQTT_URL names a broker). Any other part is 'not running here' and does not count."
)


HealthCheck = Callable[[datetime], dict[str, Any]]
_CHECKS: dict[str, HealthCheck] = {}


@dataclass(frozen=True)
class DeploymentProcess:
    """A process beside the web server whose check an app registers under its name: why it
    matters, whether this deployment runs it, and, where it does not, why not."""

    why: str
    runs_here: Callable[[], bool]
    not_here: str


DEPLOYMENT_PROCESSES: dict[str, DeploymentProcess] = {
    "bridge": DeploymentProcess(
        why="devices reach the product only through it: readings in, commands out",
        runs_here=lambda: not settings.MQTT.embedded,
        not_here=(
            "MQTT_URL is unset: the embedded broker and its bridge run inside the process "
            "that starts them (make demo, manage.py mqtt_bridge), not beside this web server"
        ),
    ),
}
WHY = {
    "database": "every request, task and bridge batch reads and writes it",
    "cache": "the locks, dedupe and correlation keys the processes share",
    "broker": "the web server queues its tasks (dispatch, retries, notifications) through it",
}


def health_check_register(name: str, check: HealthCheck) -> None:
    """An app adds a check (from its ``AppConfig.ready``): it returns ``{"ok": bool, ...}``
    and may raise; a raise is reported as the check's failure."""
    _CHECKS[name] = check


def _database(now: datetime) -> dict[str, Any]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")
    return {"ok": True, "vendor": connection.vendor}


def _cache(now: datetime) -> dict[str, Any]:
    backend = str(settings.CACHES["default"]["BACKEND"]).rsplit(".", 1)[-1]
    if backend == "LocMemCache":
        return {"ok": True, "backend": "locmem (in-process)"}
    caches["default"].get(CACHE_PROBE_KEY)  # a round trip: raises when the server is down
    return {"ok": True, "backend": backend}


def _broker(now: datetime) -> dict[str, Any]:
    from config.celery import app as celery_app

    if settings.CELERY_BROKER_EMBEDDED:
        return {
            "ok": True,
            "transport": "memory (in-process)",
            "detail": "a task queued here runs only in a process that runs a worker too "
            "(make demo runs its own); a web server alone runs none",
        }
    with celery_app.connection_for_write() as conn:
        conn.ensure_connection(max_retries=1, timeout=BROKER_TIMEOUT_S)
    return {"ok": True, "transport": conn.transport_cls}


def _checked(name: str, check: HealthCheck, now: datetime) -> dict[str, Any]:
    """The check's verdict, or its exception as the failure (credentials masked)."""
    try:
        return check(now)
    except Exception as exc:
        error = credentials_masked(f"{type(exc).__name__}: {exc}")[:ERROR_MAX_CHARS]
        logger.warning("health check %s failed: %s", name, error)
        return {"ok": False, "error": error}


def _entry(name: str, verdict: dict[str, Any]) -> dict[str, Any]:
    """The verdict with its ``status`` and ``why``; a failing process this deployment does
    not run is ``not running here`` with no verdict (``ok`` null), and counts for nothing."""
    process = DEPLOYMENT_PROCESSES.get(name)
    passed = verdict.get("ok") is True
    entry: dict[str, Any] = {"ok": verdict.get("ok"), "status": OK if passed else FAILING}
    why = process.why if process is not None else WHY.get(name)
    if why:
        entry["why"] = why
    if process is not None and not passed and not process.runs_here():
        entry.update(ok=None, status=NOT_HERE, detail=process.not_here)
    return {**entry, **{k: v for k, v in verdict.items() if k not in entry}}


@never_cache
def health(request: HttpRequest) -> JsonResponse:
    now = timezone.now()
    checks: dict[str, HealthCheck] = {"database": _database, "cache": _cache, "broker": _broker}
    checks.update(_CHECKS)
    entries = {name: _entry(name, _checked(name, check, now)) for name, check in checks.items()}
    ok = all(entry["status"] != FAILING for entry in entries.values())
    body = {"ok": ok, "rule": RULE, "checks": entries}
    return JsonResponse(body, status=200 if ok else 503)
