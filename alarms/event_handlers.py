"""Alarm handlers on the event bus, auto-loaded by the events app: a device going offline
raises its device_offline alarm, its return clears it by cause. Each handler reloads the
device rather than trusting the payload's order: a late ``DeviceWentOffline`` for a device
already back raises nothing. The bus runs each once per idempotency key."""

from __future__ import annotations

from datetime import datetime

from alarms.services import alarm_clear_by_cause, alarm_raise
from alarms.states import AlarmSeverity, AlarmSource, AlarmType
from devices.models import Device
from events.envelope import Envelope
from events.event_types import DEVICE_CAME_BACK, DEVICE_WENT_OFFLINE
from events.registry import EventRejected, event_handler

DEVICE_BACK = "device back"  # the cause an automatic clear is audited with


def _device_id(event: Envelope) -> int:
    value = event.payload.get("device_id")
    if not isinstance(value, int) or isinstance(value, bool):
        raise EventRejected(f"{event.type}: device_id is not an integer")
    return value


def _at(event: Envelope) -> datetime:
    try:
        return datetime.fromisoformat(str(event.payload["at"]))
    except (KeyError, ValueError):
        raise EventRejected(f"{event.type}: at is not an ISO time") from None


@event_handler(DEVICE_WENT_OFFLINE, name="alarms.device_went_offline")
def device_went_offline(event: Envelope) -> None:
    """Raise device_offline (major) while the device is still offline."""
    device_id = _device_id(event)
    device = Device.objects.filter(pk=device_id).values("online", "farm_id").first()
    if device is None or device["online"]:
        return
    serial = event.payload.get("serial_number", "")
    since = event.payload.get("last_seen_at") or "never"
    alarm_raise(
        farm_id=device["farm_id"],
        source=AlarmSource.DEVICE,
        source_id=device_id,
        type=AlarmType.DEVICE_OFFLINE,
        severity=AlarmSeverity.MAJOR,
        detail=f"device {serial} sent nothing since {since}",
        actor="device health",
        now=_at(event),
    )


@event_handler(DEVICE_CAME_BACK, name="alarms.device_came_back")
def device_came_back(event: Envelope) -> None:
    """Clear the device's open device_offline alarm, audited with the cause."""
    alarm_clear_by_cause(
        source=AlarmSource.DEVICE,
        source_id=_device_id(event),
        type=AlarmType.DEVICE_OFFLINE,
        cause=DEVICE_BACK,
        now=_at(event),
    )
