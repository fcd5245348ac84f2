"""The bridge's device directory: a quiet batch reads nothing, a retired device or a new
endpoint is seen once its entry is ``ttl_s`` old, and a serial the database does not know is
asked again every time, so a device provisioned a moment ago is seen at once."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from devices.directory import DeviceDirectory
from devices.models import DeviceStatus
from tests.devices.factories import make_farm

pytestmark = pytest.mark.django_db


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_fresh_entry_costs_no_read_and_a_stale_one_is_read_again() -> None:
    kit = make_farm(prefix="dir-a")
    clock = Clock()
    directory = DeviceDirectory(ttl_s=5, clock=clock)
    serial = kit.sensor.serial_number

    first = directory.devices({serial})
    assert first[serial].pk == kit.sensor.pk
    endpoints = directory.endpoints(first.values())
    assert {key for _, key in endpoints} == {"temp", "humidity"}
    with CaptureQueriesContext(connection) as quiet:
        clock.now += 4.9
        assert directory.devices({serial})[serial].status == DeviceStatus.ACTIVE
    assert len(quiet.captured_queries) == 0

    kit.sensor.status = DeviceStatus.RETIRED
    kit.sensor.save(update_fields=["status"])
    clock.now += 0.1
    assert directory.devices({serial})[serial].status == DeviceStatus.RETIRED


def test_an_unknown_serial_is_asked_every_time_and_seen_once_provisioned() -> None:
    clock = Clock()
    directory = DeviceDirectory(ttl_s=60, clock=clock)
    assert directory.devices({"dir-b-sensor"}) == {}
    reads = directory.reads
    kit = make_farm(prefix="dir-b")
    found = directory.devices({kit.sensor.serial_number, "dir-b-nobody"})
    assert set(found) == {kit.sensor.serial_number}
    assert directory.reads > reads


def test_forget_drops_every_entry() -> None:
    kit = make_farm(prefix="dir-c")
    directory = DeviceDirectory(ttl_s=60, clock=Clock())
    directory.devices({kit.sensor.serial_number})
    reads = directory.reads
    directory.forget()
    directory.devices({kit.sensor.serial_number})
    assert directory.reads == reads + 2
