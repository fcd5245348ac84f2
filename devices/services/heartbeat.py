"""The MQTT bridge's sign of life, and the ``/health`` check that reads it."""

from __future__ import annotations

from datetime import datetime

from django.conf import settings
from django.utils import timezone

from common.json_types import JsonObject
from devices.models import BridgeHeartbeat
from devices.selectors import bridge_heartbeat_latest


def bridge_heartbeat(
    *, client_id: str, connected: bool = True, now: datetime | None = None
) -> None:
    """The bridge's sign of life (call it from its loop every few seconds, and with
    ``connected=False`` on disconnect): one row per client id, updated in place."""
    BridgeHeartbeat.objects.update_or_create(
        client_id=client_id[:200],
        defaults={"connected": connected, "beat_at": now or timezone.now()},
    )


def bridge_health(now: datetime) -> JsonObject:
    """``/health``'s bridge check: a connected bridge heard from recently. The bridge's MQTT
    client id is not shown: a device logging in with it would take the bridge's session."""
    latest = bridge_heartbeat_latest()
    if latest is None:
        return {"ok": False, "error": "no bridge heartbeat yet"}
    _client_id, connected, beat_at = latest
    age_s = (now - beat_at).total_seconds()
    fresh = age_s <= settings.BRIDGE_HEARTBEAT_STALE_S
    return {
        "ok": connected and fresh,
        "connected": connected,
        "ageSeconds": round(age_s, 1),
    }
