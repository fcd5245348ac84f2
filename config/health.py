"""``GET /health``: the database, the coordination cache (Redis), the Celery broker and the
checks the apps register (the MQTT bridge's connection, from ``devices``), each with a
verdict; 503 when any fails. Every check is guarded: one that raises (its server is down)
is reported as that check's failure, so the answer is always this JSON, never a 500 page."""

from __future__ import annotations

import logging
from collections.abc import Callable
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


HealthCheck = Callable[[datetime], dict[str, Any]]
_CHECKS: dict[str, HealthCheck] = {}


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
        return {"ok": True, "transport": "memory (in-process)"}
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


@never_cache
def health(request: HttpRequest) -> JsonResponse:
    now = timezone.now()
    checks: dict[str, HealthCheck] = {"database": _database, "cache": _cache, "broker": _broker}
    checks.update(_CHECKS)
    verdicts = {name: _checked(name, check, now) for name, check in checks.items()}
    ok = all(verdict.get("ok") is True for verdict in verdicts.values())
    return JsonResponse({"ok": ok, "checks": verdicts}, status=200 if ok else 503)
