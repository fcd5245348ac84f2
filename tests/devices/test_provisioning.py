"""A device has one endpoint per endpoint of its profile, however it came to be: created by
the service, added in the admin, moved to another profile, or its profile given a new
endpoint. Telemetry for a key with no endpoint is then a recorded rejection, not a silence."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import User
from django.core.exceptions import ValidationError
from django.test import Client

from devices.models import Device, DeviceInstanceEndpoint, DeviceProfile, DeviceProfileEndpoint
from tests.devices.factories import (
    DeviceFactory,
    DeviceProfileFactory,
    FarmFactory,
    InstanceEndpointFactory,
    ProfileEndpointFactory,
    make_farm,
)

pytestmark = pytest.mark.django_db
DEVICE_URL = "/admin/devices/device/"
PROFILE_URL = "/admin/devices/deviceprofile/"


def _keys(device: Device) -> list[str]:
    rows = DeviceInstanceEndpoint.objects.filter(device=device)
    return sorted(rows.values_list("profile_endpoint__key", flat=True))


def _profile(*keys: str) -> DeviceProfile:
    profile = DeviceProfileFactory()
    for key in keys:
        ProfileEndpointFactory(profile=profile, key=key)
    return profile


@pytest.fixture
def support(client: Client) -> Client:
    User.objects.create_superuser("support", "s@example.com", "pw")
    client.login(username="support", password="pw")
    return client


def _inline(prefix: str, rows: list[dict[str, Any]]) -> dict[str, Any]:
    """An admin inline formset's POST fields for ``rows`` (each with its ``id`` if saved)."""
    initial = sum(1 for row in rows if row.get("id"))
    data: dict[str, Any] = {
        f"{prefix}-TOTAL_FORMS": str(len(rows)),
        f"{prefix}-INITIAL_FORMS": str(initial),
        f"{prefix}-MIN_NUM_FORMS": "0",
        f"{prefix}-MAX_NUM_FORMS": "1000",
    }
    for n, row in enumerate(rows):
        data.update({f"{prefix}-{n}-{field}": value for field, value in row.items()})
    return data


def _device_form(device: dict[str, Any], endpoints: list[dict[str, Any]]) -> dict[str, Any]:
    return {"name": "", "status": "active", **device, **_inline("endpoints", endpoints)}


def _saved_endpoints(device: Device) -> list[dict[str, Any]]:
    return [
        {"id": e.pk, "device": device.pk, "profile_endpoint": e.profile_endpoint_id}
        for e in DeviceInstanceEndpoint.objects.filter(device=device).order_by("pk")
    ]


def test_device_create_gives_the_device_its_profiles_endpoints() -> None:
    from devices.services import device_create

    profile = _profile("temp", "humidity")
    device = device_create(farm=FarmFactory(), profile=profile, serial_number="SVC-1")
    assert _keys(device) == ["humidity", "temp"]
    assert device_create(farm=device.farm, profile=_profile(), serial_number="SVC-2").pk


def test_endpoint_sync_is_idempotent_and_keeps_hand_made_endpoints() -> None:
    from devices.services import device_endpoints_sync

    kit = make_farm()  # endpoints built by hand, as older tests and databases have them
    kept = {e.pk for e in DeviceInstanceEndpoint.objects.filter(device=kit.actuator)}
    device_endpoints_sync(device=kit.actuator)
    device_endpoints_sync(device=kit.actuator)
    assert {e.pk for e in DeviceInstanceEndpoint.objects.filter(device=kit.actuator)} == kept
    assert _keys(kit.actuator) == ["fan", "io1", "mode"]


def test_the_factory_builds_devices_as_the_service_does() -> None:
    device = DeviceFactory(profile=_profile("temp"))
    assert _keys(device) == ["temp"]
    # a test that then builds the endpoint by hand gets that same endpoint
    again = InstanceEndpointFactory(device=device, profile_endpoint=device.profile.endpoints.get())
    assert DeviceInstanceEndpoint.objects.filter(device=device).get() == again


def test_a_device_added_in_the_admin_gets_its_profiles_endpoints(support: Client) -> None:
    farm, profile = FarmFactory(), _profile("temp", "humidity")
    form = _device_form(
        {"farm": farm.pk, "profile": profile.pk, "serial_number": "ADM-1"}, endpoints=[]
    )
    response = support.post(f"{DEVICE_URL}add/", form)
    assert response.status_code == 302, response.content.decode()[:2000]
    assert _keys(Device.objects.get(serial_number="ADM-1")) == ["humidity", "temp"]


def test_an_endpoint_added_by_hand_in_the_same_admin_form_is_not_doubled(support: Client) -> None:
    farm, profile = FarmFactory(), _profile("temp", "humidity")
    temp = profile.endpoints.get(key="temp")
    form = _device_form(
        {"farm": farm.pk, "profile": profile.pk, "serial_number": "ADM-2"},
        endpoints=[{"profile_endpoint": temp.pk, "is_enabled": ""}],  # added disabled
    )
    assert support.post(f"{DEVICE_URL}add/", form).status_code == 302
    device = Device.objects.get(serial_number="ADM-2")
    assert _keys(device) == ["humidity", "temp"]
    assert (
        DeviceInstanceEndpoint.objects.get(device=device, profile_endpoint=temp).is_enabled is False
    )


def test_moving_a_device_to_another_profile_in_the_admin_adds_its_endpoints(
    support: Client,
) -> None:
    kit = make_farm()
    relay = kit.actuator
    bigger = _profile("io1", "io2")
    form = _device_form(
        {"farm": relay.farm_id, "profile": bigger.pk, "serial_number": relay.serial_number},
        endpoints=_saved_endpoints(relay),
    )
    response = support.post(f"{DEVICE_URL}{relay.pk}/change/", form)
    assert response.status_code == 302, response.content.decode()[:2000]
    relay.refresh_from_db()
    assert relay.profile_id == bigger.pk
    new = DeviceInstanceEndpoint.objects.filter(device=relay, profile_endpoint__profile=bigger)
    assert sorted(new.values_list("profile_endpoint__key", flat=True)) == ["io1", "io2"]
    # the old profile's endpoints stay: rules and history may point at them
    assert DeviceInstanceEndpoint.objects.filter(pk=kit.io1.pk).exists()


def test_an_endpoint_added_to_a_profile_in_the_admin_reaches_its_devices(
    support: Client,
) -> None:
    kit = make_farm()
    profile = kit.sensor.profile
    rows: list[dict[str, Any]] = [
        {"id": e.pk, "profile": profile.pk, "key": e.key, "data_type": e.data_type}
        for e in DeviceProfileEndpoint.objects.filter(profile=profile).order_by("pk")
    ]
    rows.append({"key": "co2", "data_type": "number"})
    form = {"name": profile.name, **_inline("endpoints", rows)}
    response = support.post(f"{PROFILE_URL}{profile.pk}/change/", form)
    assert response.status_code == 302, response.content.decode()[:2000]
    assert _keys(kit.sensor) == ["co2", "humidity", "temp"]
    assert _keys(kit.actuator) == ["fan", "io1", "mode"]  # another profile: untouched


@pytest.mark.django_db
@pytest.mark.parametrize("serial", ["farm-bridge/x", "dev+1", "dev#1", ""])
def test_a_serial_unusable_as_a_topic_segment_or_broker_identity_is_refused(serial: str) -> None:
    """A '/' would let a device's broker identity pass for a backend client id; '+' and '#'
    are topic wildcards. The model refuses them, so the admin and every form do."""
    device = DeviceFactory.build(serial_number=serial)
    with pytest.raises(ValidationError) as refused:
        device.full_clean(exclude=["farm", "profile"])
    assert "serial_number" in refused.value.message_dict
