"""Device health: a device silent for its offline window (``offline_after_s``, by default
three of its profile's ``expected_interval_s``) goes offline, and its next message brings it
back. Each change is one transition row and one event, however many sweeps run, together or
one after another; the sweep reads one index when nothing is due, whatever the fleet."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import datetime, timedelta
from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from automation.services.ingest import telemetry_ingest
from common.json_types import JsonObject
from devices.models import (
    Device,
    DeviceHealthCause,
    DeviceHealthTransition,
    DeviceProfile,
    DeviceStatus,
)
from devices.mqtt.messages import InboundTelemetry
from devices.services import (
    device_offline_after_set,
    device_status_change,
    devices_heard_from,
    devices_offline_sweep,
    profile_expected_interval_set,
)
from tests.concurrency import race
from tests.devices.factories import DeviceFactory, DeviceProfileFactory, FarmFactory, make_farm
from tests.events.transport import event_transport

T0 = datetime(2026, 12, 1, 8, 0, tzinfo=timezone.get_current_timezone())


@pytest.fixture
def sent() -> Iterator[list[JsonObject]]:
    """The events as they leave after commit."""
    messages: list[JsonObject] = []
    with event_transport(messages.append):
        yield messages


def _events(sent: list[JsonObject], kind: str) -> list[JsonObject]:
    return [m for m in sent if m["type"] == kind]


def _device(interval_s: int = 60, **kwargs: Any) -> Device:
    farm = FarmFactory()
    profile = DeviceProfileFactory(organization=farm.organization, expected_interval_s=interval_s)
    device: Device = DeviceFactory(farm=farm, profile=profile, **kwargs)
    return device


def _sweep(at: datetime, batch: int = 100) -> list[int]:
    return [m.device_id for m in devices_offline_sweep(now=at, batch=batch)]


@pytest.mark.django_db(transaction=True)
def test_a_silent_device_goes_offline_once_and_comes_back_once(sent: list[JsonObject]) -> None:
    device = _device(last_seen_at=None)
    assert device.online is False  # never heard from: not online
    devices_heard_from(device_ids=[device.pk], now=T0)
    device.refresh_from_db()
    assert device.online and device.offline_due_at == T0 + timedelta(seconds=180)
    assert _sweep(T0 + timedelta(seconds=179)) == []
    assert _sweep(T0 + timedelta(seconds=180)) == [device.pk]
    for later in (181, 190, 600):  # beat after beat: recorded once
        assert _sweep(T0 + timedelta(seconds=later)) == []
    device.refresh_from_db()
    assert device.online is False
    offline = _events(sent, "DeviceWentOffline")
    assert len(offline) == 1
    payload = offline[0]["payload"]
    assert payload["device_id"] == device.pk and payload["farm_id"] == device.farm_id
    assert payload["serial_number"] == device.serial_number
    assert datetime.fromisoformat(str(payload["last_seen_at"])) == T0
    assert offline[0]["idempotency_key"].startswith(f"device-offline:{device.pk}:")

    back_at = T0 + timedelta(seconds=900)
    devices_heard_from(device_ids=[device.pk], now=back_at)
    devices_heard_from(device_ids=[device.pk], now=back_at + timedelta(seconds=1))
    device.refresh_from_db()
    assert device.online and device.last_seen_at == back_at + timedelta(seconds=1)
    back = _events(sent, "DeviceCameBack")
    assert len(back) == 2  # its first message ever, and this return
    assert datetime.fromisoformat(str(back[-1]["payload"]["last_seen_at"])) == back_at
    moves = list(
        DeviceHealthTransition.objects.filter(device=device)
        .order_by("pk")
        .values_list("online", "cause")
    )
    assert moves == [
        (True, DeviceHealthCause.MESSAGE),
        (False, DeviceHealthCause.SILENT),
        (True, DeviceHealthCause.MESSAGE),
    ]


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_concurrent_sweeps_flip_a_silent_device_once(sent: list[JsonObject]) -> None:
    devices = [_device() for _ in range(5)]
    ids = [d.pk for d in devices]
    devices_heard_from(device_ids=ids, now=T0)
    later = T0 + timedelta(hours=1)
    assert race(lambda: devices_offline_sweep(now=later, batch=100), 4) == []
    assert race(lambda: devices_offline_sweep(now=later, batch=100), 4) == []
    assert not Device.objects.filter(pk__in=ids, online=True).exists()
    offline = _events(sent, "DeviceWentOffline")
    assert sorted(int(str(m["payload"]["device_id"])) for m in offline) == sorted(ids)
    gone = DeviceHealthTransition.objects.filter(device_id__in=ids, online=False)
    assert gone.count() == len(ids)


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_concurrent_messages_bring_an_offline_device_back_once(sent: list[JsonObject]) -> None:
    device = _device()
    devices_heard_from(device_ids=[device.pk], now=T0)
    _sweep(T0 + timedelta(hours=1))
    back_at = T0 + timedelta(hours=2)
    assert race(lambda: devices_heard_from(device_ids=[device.pk], now=back_at), 4) == []
    device.refresh_from_db()
    assert device.online
    assert len(_events(sent, "DeviceCameBack")) == 1
    assert DeviceHealthTransition.objects.filter(device=device, online=True).count() == 1


@pytest.mark.django_db
def test_a_devices_own_window_overrides_its_profiles_default() -> None:
    quick = _device(interval_s=60, offline_after_s=30)
    slow = _device(interval_s=60)
    devices_heard_from(device_ids=[quick.pk, slow.pk], now=T0)
    assert _sweep(T0 + timedelta(seconds=30)) == [quick.pk]
    assert _sweep(T0 + timedelta(seconds=179)) == []
    assert _sweep(T0 + timedelta(seconds=180)) == [slow.pk]


@pytest.mark.django_db
def test_editing_a_window_or_an_interval_moves_the_offline_time() -> None:
    device = _device(interval_s=60)
    other = _device(interval_s=60, offline_after_s=1000)
    devices_heard_from(device_ids=[device.pk, other.pk], now=T0)
    device_offline_after_set(device=device, offline_after_s=20)
    assert device.offline_due_at == T0 + timedelta(seconds=20)
    device_offline_after_set(device=device, offline_after_s=None)  # the profile's again
    assert device.offline_due_at == T0 + timedelta(seconds=180)
    profile = DeviceProfile.objects.get(pk=device.profile_id)
    profile_expected_interval_set(profile=profile, expected_interval_s=10)
    device.refresh_from_db()
    assert device.offline_due_at == T0 + timedelta(seconds=30)
    profile_expected_interval_set(
        profile=DeviceProfile.objects.get(pk=other.profile_id), expected_interval_s=10
    )
    other.refresh_from_db()
    assert other.offline_due_at == T0 + timedelta(seconds=1000)  # its own window holds
    assert _sweep(T0 + timedelta(seconds=30)) == [device.pk]


@pytest.mark.django_db
def test_the_sweep_reads_one_index_when_nothing_is_due() -> None:
    def statements(fleet: int) -> int:
        ids = [_device().pk for _ in range(fleet)]
        devices_heard_from(device_ids=ids, now=T0)
        with CaptureQueriesContext(connection) as queries:
            assert _sweep(T0 + timedelta(seconds=10)) == []
        return len(queries)

    assert statements(1) == 1
    assert statements(20) == 1


@pytest.mark.django_db
def test_a_due_batch_costs_the_same_statements_whatever_its_size() -> None:
    def statements(fleet: int) -> int:
        ids = [_device().pk for _ in range(fleet)]
        devices_heard_from(device_ids=ids, now=T0)
        with CaptureQueriesContext(connection) as queries:
            assert len(_sweep(T0 + timedelta(days=1), batch=100)) == fleet
        return len(queries)

    assert statements(2) == statements(15)


@pytest.mark.django_db
def test_the_sweep_takes_a_bounded_batch_oldest_first() -> None:
    devices = [_device() for _ in range(3)]
    for n, device in enumerate(devices):
        devices_heard_from(device_ids=[device.pk], now=T0 + timedelta(seconds=n))
    later = T0 + timedelta(days=1)
    assert _sweep(later, batch=2) == [devices[0].pk, devices[1].pk]
    assert _sweep(later, batch=2) == [devices[2].pk]


@pytest.mark.django_db(transaction=True)
def test_a_retired_device_leaves_the_online_devices_without_going_silent(
    sent: list[JsonObject],
) -> None:
    device = _device()
    devices_heard_from(device_ids=[device.pk], now=T0)
    assert device_status_change(device_id=device.pk, status=DeviceStatus.RETIRED, actor="t")
    device.refresh_from_db()
    assert device.online is False
    assert _sweep(T0 + timedelta(days=1)) == []
    assert not _events(sent, "DeviceWentOffline")
    cause = DeviceHealthTransition.objects.filter(device=device, online=False).get().cause
    assert cause == DeviceHealthCause.RETIRED


@pytest.mark.django_db(transaction=True)
def test_a_telemetry_message_brings_its_device_back_through_ingest(
    sent: list[JsonObject],
) -> None:
    kit = make_farm()
    sensor = kit.sensor
    assert set(_sweep(timezone.now() + timedelta(hours=1))) == {sensor.pk, kit.actuator.pk}
    sensor.refresh_from_db()
    assert sensor.online is False
    body = json.dumps({"values": {"temp": 21.5}})
    telemetry_ingest(messages=[InboundTelemetry(sensor.serial_number, body, timezone.now())])
    telemetry_ingest(messages=[InboundTelemetry(sensor.serial_number, body, timezone.now())])
    sensor.refresh_from_db()
    assert sensor.online and sensor.offline_due_at is not None
    assert sensor.offline_due_at > timezone.now()
    back = _events(sent, "DeviceCameBack")
    assert [m["payload"]["device_id"] for m in back] == [sensor.pk]
