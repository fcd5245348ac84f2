"""The devices' hand-written statements of ingest (``devices.ingest_sql``) read what the ORM
reads: the same instances, attached as ``select_related`` attaches them, so the code past
the read cannot tell which built them."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import models
from django.utils import timezone

from devices.ingest_sql import devices_touch, devices_with_endpoints
from devices.models import Device, DeviceInstanceEndpoint
from tests.devices.factories import DeviceFactory, DeviceProfileFactory, make_farm

pytestmark = pytest.mark.django_db


def _columns(row: models.Model) -> list[object]:
    return [getattr(row, f.attname) for f in row._meta.concrete_fields]


def test_a_device_is_read_with_its_farm_and_endpoints_as_the_orm_reads_them() -> None:
    kit = make_farm(prefix="isql-a")
    bare = DeviceFactory(farm=kit.farm, profile=DeviceProfileFactory(), serial_number="isql-b")
    found = devices_with_endpoints({kit.sensor.serial_number, bare.serial_number, "isql-none"})

    assert set(found) == {kit.sensor.serial_number, bare.serial_number}
    entry = found[kit.sensor.serial_number]
    orm = Device.objects.select_related("farm").get(pk=kit.sensor.pk)
    assert _columns(entry.device) == _columns(orm)
    assert _columns(entry.device.farm) == _columns(orm.farm)
    endpoints = DeviceInstanceEndpoint.objects.filter(device=orm).select_related("profile_endpoint")
    assert set(entry.endpoints) == {"temp", "humidity"}
    for endpoint in endpoints:
        read = entry.endpoints[endpoint.profile_endpoint.key]
        assert _columns(read) == _columns(endpoint)
        assert _columns(read.profile_endpoint) == _columns(endpoint.profile_endpoint)
    assert found[bare.serial_number].endpoints == {}  # a device with none is still known


def test_the_touch_names_the_devices_not_online_and_moves_their_offline_time() -> None:
    profile = DeviceProfileFactory(expected_interval_s=60)
    online = DeviceFactory(profile=profile)
    silent = DeviceFactory(profile=profile, last_seen_at=None, offline_after_s=20)
    now = timezone.now().replace(microsecond=250_000)

    assert devices_touch([online.pk, silent.pk], now) == [silent.pk]

    online.refresh_from_db()
    silent.refresh_from_db()
    assert (online.last_seen_at, online.offline_due_at) == (now, now + timedelta(seconds=180))
    assert (silent.last_seen_at, silent.offline_due_at) == (now, now + timedelta(seconds=20))
    assert silent.online is False  # the touch moves no device: the compare-and-set does
