"""``GET /health``: the database, the Celery broker and the MQTT bridge's connection (its
heartbeat row, written by ``bridge_heartbeat``), each with a verdict; 503 when any fails."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.conf import settings
from django.db import connection
from django.http import HttpRequest, JsonResponse
from django.utils import timezone

from devices.models import BridgeHeartbeat
from devices.selectors import bridge_heartbeat_latest

BROKER_TIMEOUT_S = 2.0


def bridge_heartbeat(
    *, client_id: str, connected: bool = True, now: datetime | None = None
) -> None:
    """The bridge's sign of life (call it from its loop every few seconds, and with
    ``connected=False`` on disconnect): one row per client id, updated in place."""
    BridgeHeartbeat.objects.update_or_create(
        client_id=client_id[:200],
        defaults={"connected": connected, "beat_at": now or timezone.now()},
    )


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


def _bridge(now: datetime) -> dict[str, Any]:
    latest = bridge_heartbeat_latest()
    if latest is None:
        return {"ok": False, "error": "no bridge heartbeat yet"}
    client_id, connected, beat_at = latest
    age_s = (now - beat_at).total_seconds()
    fresh = age_s <= settings.BRIDGE_HEARTBEAT_STALE_S
    return {
        "ok": connected and fresh,
        "clientId": client_id,
        "connected": connected,
        "ageSeconds": round(age_s, 1),
    }


def health(request: HttpRequest) -> JsonResponse:
    checks = {"database": _database(), "broker": _broker(), "bridge": _bridge(timezone.now())}
    ok = all(check["ok"] for check in checks.values())
    return JsonResponse({"ok": ok, "checks": checks}, status=200 if ok else 503)
