"""The bridge's device directory: a quiet batch reads only the configuration version, a
retired device or a disabled endpoint is seen by the very next batch (the write moved the
version), and a serial the database does not know is asked again every time, so a device
provisioned a moment ago is seen at once."""

from __future__ import annotations

import pytest

from common.hot_sql import statements_counted
from devices.directory import DeviceDirectory
from devices.models import DeviceInstanceEndpoint, DeviceStatus
from tests.devices.factories import make_farm

pytestmark = pytest.mark.django_db


def test_a_quiet_batch_reads_only_the_version_and_a_change_is_seen_next() -> None:
    kit = make_farm(prefix="dir-a")
    directory = DeviceDirectory()
    serial = kit.sensor.serial_number

    first = directory.devices({serial})
    assert first[serial].pk == kit.sensor.pk
    endpoints = directory.endpoints(first.values())
    assert {key for _, key in endpoints} == {"temp", "humidity"}
    with statements_counted() as quiet:
        assert directory.devices({serial})[serial].status == DeviceStatus.ACTIVE
    assert quiet.total == 1 and not quiet.orm  # the version, and nothing else

    kit.sensor.status = DeviceStatus.RETIRED
    kit.sensor.save(update_fields=["status"])
    assert directory.devices({serial})[serial].status == DeviceStatus.RETIRED

    DeviceInstanceEndpoint.objects.filter(pk=kit.temp.pk).update(is_enabled=False)
    found = directory.endpoints(directory.devices({serial}).values())
    assert found[(kit.sensor.pk, "temp")].is_enabled is False


def test_a_reading_of_a_device_keeps_its_entry() -> None:
    """A device's touch and an endpoint's last value are not configuration."""
    kit = make_farm(prefix="dir-d")
    directory = DeviceDirectory()
    directory.devices({kit.sensor.serial_number})
    reads = directory.reads
    DeviceInstanceEndpoint.objects.filter(pk=kit.temp.pk).update(last_value=3)
    directory.devices({kit.sensor.serial_number})
    assert directory.reads == reads


def test_an_unknown_serial_is_asked_every_time_and_seen_once_provisioned() -> None:
    directory = DeviceDirectory()
    assert directory.devices({"dir-b-sensor"}) == {}
    reads = directory.reads
    kit = make_farm(prefix="dir-b")
    found = directory.devices({kit.sensor.serial_number, "dir-b-nobody"})
    assert set(found) == {kit.sensor.serial_number}
    assert directory.reads > reads
    reads = directory.reads
    directory.devices({"dir-b-nobody"})
    assert directory.reads == reads + 1


def test_forget_drops_every_entry() -> None:
    kit = make_farm(prefix="dir-c")
    directory = DeviceDirectory()
    directory.devices({kit.sensor.serial_number})
    reads = directory.reads
    directory.forget()
    directory.devices({kit.sensor.serial_number})
    assert directory.reads == reads + 1  # the device with its endpoints, in one statement
