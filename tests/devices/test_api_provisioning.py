"""Provisioning over the API: farms, profiles with their endpoint catalogue, devices with a
one-time MQTT login, rotation, status moves and endpoint configuration. Writes need an admin
of the row's organisation; another organisation's rows are a 404; every refusal is a 4xx in
the API's error shape naming the field; a broker that does not confirm is a 503 that leaves
no device behind."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from django.db import connection
from django.test import override_settings
from django.test.utils import CaptureQueriesContext
from rest_framework.test import APIClient

from common.models import MemberRole, OrganizationMember
from devices.models import Device, DeviceInstanceEndpoint, DeviceProfile, DeviceStatus, Farm
from tests.common.auth import token_client
from tests.conftest import Tenant
from tests.devices.factories import DeviceFactory, DeviceProfileFactory, ProfileEndpointFactory
from tests.devices.fake_credentials import FakeBackend

pytestmark = pytest.mark.django_db
FAKE = "tests.devices.fake_credentials.FakeBackend"
DOWN = "tests.devices.fake_credentials.DownBackend"
RELAY = {
    "key": "io1",
    "data_type": "bool",
    "writable": True,
    "rpc_method": "setIO",
    "rpc_param_key": "io1",
}


@pytest.fixture
def fake_broker() -> Iterator[dict[str, str]]:
    FakeBackend.logins.clear()
    with override_settings(DEVICE_CREDENTIALS_BACKEND=FAKE):
        yield FakeBackend.logins


def admin(tenant: Tenant) -> APIClient:
    OrganizationMember.objects.filter(user=tenant.user).update(role=MemberRole.ADMIN)
    return token_client(tenant.user)


def viewer(tenant: Tenant) -> APIClient:
    """The tenant's user as a viewer of its organisation: reads, never writes."""
    OrganizationMember.objects.filter(user=tenant.user).update(role=MemberRole.VIEWER)
    return token_client(tenant.user)


def _fields(response: Any, status: int = 400) -> dict[str, Any]:
    assert response.status_code == status, response.content
    body = response.json()
    assert body["code"] == "invalid"
    fields: dict[str, Any] = body["fields"]
    return fields


def _org(tenant: Tenant) -> int:
    return tenant.kit.farm.organization_id


def _device_body(tenant: Tenant, serial: str = "SN-NEW-1", **extra: Any) -> dict[str, Any]:
    body = {"farm": tenant.kit.farm.pk, "profile": tenant.kit.actuator.profile_id}
    return {**body, "serial_number": serial, "name": "greenhouse relay", **extra}


# Farms


def test_an_admin_creates_and_renames_a_farm(tenants: tuple[Tenant, Tenant]) -> None:
    alpha, _ = tenants
    client = admin(alpha)
    org = alpha.kit.farm.organization_id
    made = client.post(
        "/api/v1/farms/", {"organization": org, "name": "North", "time_zone": "Europe/Oslo"}
    )
    assert made.status_code == 201, made.content
    pk = made.json()["id"]
    assert Farm.objects.get(pk=pk).time_zone == "Europe/Oslo"
    changed = client.patch(f"/api/v1/farms/{pk}/", {"name": "North 2", "time_zone": "UTC"})
    assert changed.status_code == 200 and changed.json()["name"] == "North 2"
    assert Farm.objects.get(pk=pk).time_zone == "UTC"


def test_a_farm_needs_a_known_zone_and_a_free_name(tenants: tuple[Tenant, Tenant]) -> None:
    alpha, _ = tenants
    client = admin(alpha)
    org = alpha.kit.farm.organization_id
    bad_zone = {"organization": org, "name": "South", "time_zone": "Mars/Olympus"}
    assert "time_zone" in _fields(client.post("/api/v1/farms/", bad_zone))
    taken = {"organization": org, "name": alpha.kit.farm.name}
    assert "name" in _fields(client.post("/api/v1/farms/", taken))
    farm = alpha.kit.farm.pk
    assert "time_zone" in _fields(client.patch(f"/api/v1/farms/{farm}/", {"time_zone": "Nowhere"}))
    other = client.post("/api/v1/farms/", {"organization": org, "name": "Other"}).json()["id"]
    assert "name" in _fields(client.patch(f"/api/v1/farms/{other}/", {"name": alpha.kit.farm.name}))
    moved = client.patch(f"/api/v1/farms/{farm}/", {"organization": org})
    assert "organization" in _fields(moved)


def test_farm_writes_need_an_admin_of_that_organisation(tenants: tuple[Tenant, Tenant]) -> None:
    alpha, beta = tenants
    member = viewer(alpha)
    org = alpha.kit.farm.organization_id
    refused = member.post("/api/v1/farms/", {"organization": org, "name": "X"})
    assert refused.status_code == 403 and refused.json()["code"] == "permission_denied"
    assert member.patch(f"/api/v1/farms/{alpha.kit.farm.pk}/", {"name": "Y"}).status_code == 403
    client = admin(alpha)
    theirs = {"organization": beta.kit.farm.organization_id, "name": "Z"}
    assert "organization" in _fields(client.post("/api/v1/farms/", theirs))
    assert client.patch(f"/api/v1/farms/{beta.kit.farm.pk}/", {"name": "Z"}).status_code == 404
    assert not Farm.objects.filter(name__in=["X", "Y", "Z"]).exists()


# Profiles


def test_a_profile_is_created_with_its_catalogue(tenants: tuple[Tenant, Tenant]) -> None:
    alpha, _ = tenants
    endpoints = [
        RELAY,
        {"key": "fan", "data_type": "number", "min_value": 0, "max_value": 100, "unit": "%"},
        {"key": "mode", "data_type": "enum", "allowed_values": ["auto", "manual"]},
    ]
    made = admin(alpha).post(
        "/api/v1/profiles/",
        {"organization": _org(alpha), "name": "Relay v2", "endpoints": endpoints},
        format="json",
    )
    assert made.status_code == 201, made.content
    assert sorted(e["key"] for e in made.json()["endpoints"]) == ["fan", "io1", "mode"]
    units = {e["key"]: e["unit"] for e in made.json()["endpoints"]}
    assert units == {"fan": "%", "io1": "", "mode": ""}  # shown after each value on the pages
    listed = admin(alpha).get("/api/v1/profiles/").json()["results"]
    assert "Relay v2" in [p["name"] for p in listed]  # unused yet, but visible to its maker


def test_a_writable_endpoint_without_a_parameter_name_takes_its_key(
    tenants: tuple[Tenant, Tenant],
) -> None:
    """Firmware names a command's parameter as the endpoint unless told otherwise; an empty
    name would make every command to the endpoint ``binding_invalid``."""
    alpha, _ = tenants
    pump = {"key": "pump", "data_type": "bool", "writable": True, "rpc_method": "setIO"}
    sensor = {"key": "level", "data_type": "number"}
    body = {"organization": _org(alpha), "name": "Pump v1", "endpoints": [pump, sensor]}
    made = admin(alpha).post("/api/v1/profiles/", body, format="json")
    assert made.status_code == 201, made.content
    keys = {e["key"]: e["rpc_param_key"] for e in made.json()["endpoints"]}
    assert keys == {"pump": "pump", "level": ""}


@pytest.mark.parametrize(
    ("endpoint", "field"),
    [
        ({"key": "io2", "data_type": "bool", "writable": True}, "rpc_method"),
        ({"key": "mode", "data_type": "enum"}, "allowed_values"),
        ({"key": "mode", "data_type": "enum", "allowed_values": ["a", "a"]}, "allowed_values"),
        ({"key": "mode", "data_type": "enum", "allowed_values": [1]}, "allowed_values"),
        ({"key": "fan", "data_type": "number", "min_value": 5, "max_value": 1}, "max_value"),
        ({"key": "io2", "data_type": "bool", "min_value": 0}, "min_value"),
        ({"key": "io2", "data_type": "colour"}, "data_type"),
        ({"data_type": "bool"}, "key"),
    ],
)
def test_a_bad_catalogue_entry_is_a_field_error(
    tenants: tuple[Tenant, Tenant], endpoint: dict[str, Any], field: str
) -> None:
    alpha, _ = tenants
    body = {"organization": _org(alpha), "name": "Broken", "endpoints": [RELAY, endpoint]}
    fields = _fields(admin(alpha).post("/api/v1/profiles/", body, format="json"))
    assert field in fields["endpoints"]["1"], fields  # the second entry
    assert not DeviceProfile.objects.filter(name="Broken").exists()


def test_keys_are_unique_and_names_too(tenants: tuple[Tenant, Tenant]) -> None:
    alpha, _ = tenants
    client = admin(alpha)
    twice = {"organization": _org(alpha), "name": "Twice", "endpoints": [RELAY, RELAY]}
    assert (
        "key" in _fields(client.post("/api/v1/profiles/", twice, format="json"))["endpoints"]["1"]
    )
    taken = {"organization": _org(alpha), "name": alpha.kit.actuator.profile.name}
    assert "name" in _fields(client.post("/api/v1/profiles/", taken, format="json"))
    again = client.post(
        f"/api/v1/profiles/{alpha.kit.actuator.profile_id}/endpoints/",
        {"endpoints": [RELAY]},
        format="json",
    )
    assert "endpoints" in _fields(again)  # io1 is in the catalogue already


def test_new_endpoints_reach_every_device_of_the_profile(tenants: tuple[Tenant, Tenant]) -> None:
    alpha, _ = tenants
    profile = alpha.kit.actuator.profile
    second = DeviceFactory(farm=alpha.kit.farm, profile=profile)
    added = admin(alpha).post(
        f"/api/v1/profiles/{profile.pk}/endpoints/",
        {"endpoints": [{"key": "light", "data_type": "number"}]},
        format="json",
    )
    assert added.status_code == 201, added.content
    assert "light" in [e["key"] for e in added.json()["endpoints"]]
    for device in (alpha.kit.actuator, second):
        keys = DeviceInstanceEndpoint.objects.filter(device=device).values_list(
            "profile_endpoint__key", flat=True
        )
        assert "light" in keys


def test_only_admins_change_profiles_and_not_another_organisations(
    tenants: tuple[Tenant, Tenant],
) -> None:
    alpha, beta = tenants
    member = viewer(alpha)
    mine = {"organization": _org(alpha), "name": "P"}
    assert member.post("/api/v1/profiles/", mine, format="json").status_code == 403
    client = admin(alpha)
    theirs = f"/api/v1/profiles/{beta.kit.sensor.profile_id}/"
    assert client.patch(theirs, {"name": "Mine now"}).status_code == 404
    extend = {"endpoints": [{"key": "light", "data_type": "number"}]}
    assert client.post(f"{theirs}endpoints/", extend, format="json").status_code == 404
    own = alpha.kit.sensor.profile_id
    renamed = client.patch(f"/api/v1/profiles/{own}/", {"name": "Sensor v3"})
    assert renamed.status_code == 200 and renamed.json()["name"] == "Sensor v3"
    moved = client.patch(f"/api/v1/profiles/{own}/", {"organization": None}, format="json")
    assert "organization" in _fields(moved)


# Devices


def test_a_device_is_provisioned_with_its_endpoints_and_a_login_shown_once(
    tenants: tuple[Tenant, Tenant], fake_broker: dict[str, str]
) -> None:
    alpha, _ = tenants
    client = admin(alpha)
    made = client.post("/api/v1/devices/", _device_body(alpha), format="json")
    assert made.status_code == 201, made.content
    assert made["Cache-Control"] == "no-store"
    body = made.json()
    login = body["mqtt_credentials"]
    assert login["username"] == "SN-NEW-1" and fake_broker["SN-NEW-1"] == login["password"]
    device = Device.objects.get(pk=body["id"])
    assert device.endpoints.count() == 3  # io1, fan, mode of the relay profile
    shown = client.get(f"/api/v1/devices/{device.pk}/").json()
    assert "mqtt_credentials" not in shown and login["password"] not in str(shown)


def test_without_a_credentials_backend_the_login_is_null(tenants: tuple[Tenant, Tenant]) -> None:
    alpha, _ = tenants
    made = admin(alpha).post("/api/v1/devices/", _device_body(alpha), format="json")
    assert made.status_code == 201 and made.json()["mqtt_credentials"] is None


def test_a_broker_that_does_not_confirm_leaves_no_device(tenants: tuple[Tenant, Tenant]) -> None:
    alpha, _ = tenants
    with override_settings(DEVICE_CREDENTIALS_BACKEND=DOWN):
        made = admin(alpha).post("/api/v1/devices/", _device_body(alpha), format="json")
    assert made.status_code == 503
    assert made.json()["code"] == "broker_unavailable" and made.json()["detail"]
    assert not Device.objects.filter(serial_number="SN-NEW-1").exists()
    assert not DeviceInstanceEndpoint.objects.filter(device__serial_number="SN-NEW-1").exists()


def test_a_replayed_create_is_the_same_device_without_the_password(
    tenants: tuple[Tenant, Tenant], fake_broker: dict[str, str]
) -> None:
    alpha, _ = tenants
    client = admin(alpha)
    first = client.post(
        "/api/v1/devices/", _device_body(alpha), format="json", HTTP_IDEMPOTENCY_KEY="k-1"
    )
    again = client.post(
        "/api/v1/devices/", _device_body(alpha), format="json", HTTP_IDEMPOTENCY_KEY="k-1"
    )
    assert first.status_code == again.status_code == 201
    assert again["Idempotent-Replayed"] == "true"
    assert again.json()["id"] == first.json()["id"]
    password = first.json()["mqtt_credentials"]["password"]
    assert again.json()["mqtt_credentials"] == {"username": "SN-NEW-1", "password": None}
    assert password not in again.content.decode()
    assert Device.objects.filter(serial_number="SN-NEW-1").count() == 1
    assert fake_broker["SN-NEW-1"] == password  # the replay did not rotate the login


def test_a_second_device_with_the_same_serial_is_refused(tenants: tuple[Tenant, Tenant]) -> None:
    alpha, beta = tenants
    client = admin(alpha)
    assert client.post("/api/v1/devices/", _device_body(alpha), format="json").status_code == 201
    fields = _fields(client.post("/api/v1/devices/", _device_body(alpha), format="json"))
    assert "serial_number" in fields
    taken_elsewhere = _device_body(alpha, serial=beta.kit.sensor.serial_number)
    assert "serial_number" in _fields(client.post("/api/v1/devices/", taken_elsewhere))
    bad = _device_body(alpha, serial="has/slash")
    assert "serial_number" in _fields(client.post("/api/v1/devices/", bad, format="json"))


def test_device_create_checks_the_farm_and_profile_scope(tenants: tuple[Tenant, Tenant]) -> None:
    alpha, beta = tenants
    client = admin(alpha)
    their_farm = {**_device_body(alpha), "farm": beta.kit.farm.pk}
    assert "farm" in _fields(client.post("/api/v1/devices/", their_farm, format="json"))
    their_profile = {**_device_body(alpha), "profile": beta.kit.sensor.profile_id}
    assert "profile" in _fields(client.post("/api/v1/devices/", their_profile, format="json"))
    member = token_client(alpha.user)
    OrganizationMember.objects.filter(user=alpha.user).update(role=MemberRole.VIEWER)
    assert member.post("/api/v1/devices/", _device_body(alpha), format="json").status_code == 403


def test_a_device_keeps_its_serial_farm_and_profile(tenants: tuple[Tenant, Tenant]) -> None:
    alpha, _ = tenants
    client = admin(alpha)
    url = f"/api/v1/devices/{alpha.kit.actuator.pk}/"
    renamed = client.patch(url, {"name": "pump house"}, format="json")
    assert renamed.status_code == 200 and renamed.json()["name"] == "pump house"
    for change in ({"serial_number": "SN-X"}, {"farm": 1}, {"profile": 1}, {"status": "retired"}):
        assert set(change) <= set(_fields(client.patch(url, change, format="json")))
    assert Device.objects.get(pk=alpha.kit.actuator.pk).serial_number == "alpha-relay"


def test_rotating_the_login_replaces_the_password(
    tenants: tuple[Tenant, Tenant], fake_broker: dict[str, str]
) -> None:
    alpha, beta = tenants
    client = admin(alpha)
    made = client.post("/api/v1/devices/", _device_body(alpha), format="json").json()
    rotated = client.post(f"/api/v1/devices/{made['id']}/credentials/")
    assert rotated.status_code == 201 and rotated["Cache-Control"] == "no-store"
    password = rotated.json()["password"]
    assert password != made["mqtt_credentials"]["password"]
    assert fake_broker["SN-NEW-1"] == password
    assert client.post(f"/api/v1/devices/{beta.kit.sensor.pk}/credentials/").status_code == 404
    assert (
        token_client(beta.user).post(f"/api/v1/devices/{made['id']}/credentials/").status_code
        == 404
    )


def test_rotation_needs_a_backend_and_a_device_that_is_not_retired(
    tenants: tuple[Tenant, Tenant],
) -> None:
    alpha, _ = tenants
    client = admin(alpha)
    url = f"/api/v1/devices/{alpha.kit.actuator.pk}/credentials/"
    unmanaged = client.post(url)
    assert unmanaged.status_code == 409 and unmanaged.json()["code"] == "credentials_not_managed"
    Device.objects.filter(pk=alpha.kit.actuator.pk).update(status=DeviceStatus.RETIRED)
    with override_settings(DEVICE_CREDENTIALS_BACKEND=FAKE):
        retired = client.post(url)
    assert retired.status_code == 409 and retired.json()["code"] == "conflict"


def test_status_moves_go_through_the_status_service(tenants: tuple[Tenant, Tenant]) -> None:
    alpha, beta = tenants
    client = admin(alpha)
    url = f"/api/v1/devices/{alpha.kit.actuator.pk}/status/"
    for status in ("maintenance", "retired", "active", "active"):
        moved = client.post(url, {"status": status}, format="json")
        assert moved.status_code == 200 and moved.json()["status"] == status
        assert Device.objects.get(pk=alpha.kit.actuator.pk).status == status
    assert "status" in _fields(client.post(url, {"status": "bogus"}, format="json"))
    theirs = f"/api/v1/devices/{beta.kit.actuator.pk}/status/"
    assert client.post(theirs, {"status": "retired"}, format="json").status_code == 404
    member = viewer(beta)
    assert member.post(theirs, {"status": "retired"}, format="json").status_code == 403
    assert Device.objects.get(pk=beta.kit.actuator.pk).status == DeviceStatus.ACTIVE


def test_a_status_move_the_broker_does_not_confirm_is_a_503(
    tenants: tuple[Tenant, Tenant], monkeypatch: pytest.MonkeyPatch
) -> None:
    from devices import api
    from devices.services.credentials import CredentialsUnavailable

    def unconfirmed(**kwargs: Any) -> bool:
        raise CredentialsUnavailable("broker timed out")

    monkeypatch.setattr(api, "device_status_change", unconfirmed)
    alpha, _ = tenants
    url = f"/api/v1/devices/{alpha.kit.actuator.pk}/status/"
    moved = admin(alpha).post(url, {"status": "retired"}, format="json")
    assert moved.status_code == 503 and moved.json()["code"] == "broker_unavailable"


# Endpoints


def test_an_admin_configures_a_devices_endpoint(tenants: tuple[Tenant, Tenant]) -> None:
    alpha, beta = tenants
    client = admin(alpha)
    url = f"/api/v1/endpoints/{alpha.kit.io1.pk}/"
    changes = {"is_enabled": False, "rpc_method_override": "setRelay"}
    changed = client.patch(url, changes, format="json")
    assert changed.status_code == 200, changed.content
    alpha.kit.io1.refresh_from_db()
    assert alpha.kit.io1.is_enabled is False and alpha.kit.io1.rpc_method == "setRelay"
    assert "is_enabled" in _fields(client.patch(url, {"is_enabled": "no"}, format="json"))
    assert "last_value" in _fields(client.patch(url, {"last_value": 1}, format="json"))
    theirs = f"/api/v1/endpoints/{beta.kit.io1.pk}/"
    assert client.patch(theirs, {"is_enabled": False}, format="json").status_code == 404
    beta_member = viewer(beta)
    assert beta_member.patch(theirs, {"is_enabled": False}, format="json").status_code == 403


# Cost per row


@pytest.mark.parametrize("resource", ["farms", "devices", "profiles", "endpoints"])
def test_list_queries_do_not_grow_with_the_rows(
    tenants: tuple[Tenant, Tenant], resource: str
) -> None:
    alpha, _ = tenants
    client = admin(alpha)

    def count() -> int:
        with CaptureQueriesContext(connection) as queries:
            assert client.get(f"/api/v1/{resource}/").status_code == 200
        return len(queries)

    count()  # the token's first use of the run is recorded once
    before = count()
    for n in range(5):
        profile = DeviceProfileFactory()
        ProfileEndpointFactory(profile=profile)
        farm = Farm.objects.create(organization=alpha.kit.farm.organization, name=f"More {n}")
        DeviceFactory(farm=farm, profile=profile)
    assert count() == before
