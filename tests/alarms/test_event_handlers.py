"""Device health raises and clears alarms through the event bus: DeviceWentOffline raises
one device_offline alarm (major) while the device is still offline, DeviceCameBack clears it
audited with the cause "device back", and a late offline event for a device already back
raises nothing."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from alarms.event_handlers import device_came_back, device_went_offline
from alarms.models import Alarm, AlarmTransition
from devices.models import Device
from events.envelope import Envelope
from events.registry import registry
from tests.devices.factories import DeviceFactory

pytestmark = pytest.mark.django_db
AT = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


def _event(kind: str, device: Device, at: datetime = AT) -> Envelope:
    payload: dict[str, Any] = {
        "device_id": device.pk,
        "serial_number": device.serial_number,
        "farm_id": device.farm_id,
        "last_seen_at": "2026-03-01T11:57:00+00:00",
        "at": at.isoformat(),
    }
    return Envelope(
        event_id=f"e-{kind}-{device.pk}",
        idempotency_key=f"{kind}:{device.pk}",
        type=kind,
        occurred_at=at.isoformat(),
        producer="devices",
        version=1,
        payload=payload,
    )


def test_the_handlers_are_registered_on_the_bus() -> None:
    names = {h.name for h in registry.handlers_for("DeviceWentOffline")}
    assert "alarms.device_went_offline" in names
    assert "alarms.device_came_back" in {h.name for h in registry.handlers_for("DeviceCameBack")}


def test_offline_raises_and_coming_back_clears_by_cause() -> None:
    device = DeviceFactory()
    Device.objects.filter(pk=device.pk).update(online=False)
    device_went_offline(_event("DeviceWentOffline", device))
    device_went_offline(_event("DeviceWentOffline", device))  # a second sweep's event
    alarm = Alarm.objects.get()
    assert (alarm.source, alarm.source_id, alarm.type, alarm.severity, alarm.count) == (
        "device",
        device.pk,
        "device_offline",
        "major",
        2,
    )
    assert device.serial_number in alarm.detail
    device_came_back(_event("DeviceCameBack", device))
    alarm.refresh_from_db()
    assert (alarm.status, alarm.cleared_by, alarm.cleared_at) == ("cleared", "device back", AT)
    last = AlarmTransition.objects.filter(alarm=alarm).latest("pk")
    assert (last.reason, last.actor) == ("cleared_by_cause", "device back")


def test_a_late_offline_event_for_a_device_already_back_raises_nothing() -> None:
    device = DeviceFactory()
    Device.objects.filter(pk=device.pk).update(online=True)
    device_went_offline(_event("DeviceWentOffline", device))
    assert not Alarm.objects.exists()
