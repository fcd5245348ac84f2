"""``GET /health``: the database, the Celery broker and the checks the apps register (the
MQTT bridge's connection, from ``devices``), each with a verdict; 503 when any fails."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any

from django.conf import settings
from django.db import connection
from django.http import HttpRequest, JsonResponse
from django.utils import timezone

BROKER_TIMEOUT_S = 2


HealthCheck = Callable[[datetime], dict[str, Any]]
_CHECKS: dict[str, HealthCheck] = {}


def health_check_register(name: str, check: HealthCheck) -> None:
    """An app adds a check (from its ``AppConfig.ready``): it returns ``{"ok": bool, ...}``."""
    _CHECKS[name] = check


def _database() -> dict[str, Any]:
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
        return {"ok": True, "vendor": connection.vendor}
    except Exception as exc:
        return {"ok": False, "error": str(exc)[:200]}


def _broker() -> dict[str, Any]:
    from config.celery import app as celery_app

    if settings.CELERY_BROKER_EMBEDDED:
        return {"ok": True, "transport": "memory (in-process)"}
    try:
        with celery_app.connection_for_write() as conn:
            conn.ensure_connection(max_retries=1, timeout=BROKER_TIMEOUT_S)
        return {"ok": True, "transport": conn.transport_cls}
    except Exception as exc:
        return {"ok": False, "error": str(exc)[:200]}


def health(request: HttpRequest) -> JsonResponse:
    now = timezone.now()
    checks = {"database": _database(), "broker": _broker()}
    checks.update((name, check(now)) for name, check in _CHECKS.items())
    ok = all(check["ok"] for check in checks.values())
    return JsonResponse({"ok": ok, "checks": checks}, status=200 if ok else 503)
