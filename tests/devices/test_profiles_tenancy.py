"""Device profiles belong to an organisation: two organisations may both have a "Relay 4",
neither sees nor learns the other's names, and a device uses only its farm's organisation's
profiles or the global ones (no organisation), which every organisation sees and only a
superuser changes, over the API and in the admin."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import Permission, User
from django.test import Client
from rest_framework.test import APIClient

from common.models import MemberRole, OrganizationMember
from devices.models import Device, DeviceProfile
from devices.services import ProvisioningRefused, device_create
from tests.common.auth import token_client
from tests.conftest import Tenant
from tests.devices.factories import DeviceProfileFactory, ProfileEndpointFactory

pytestmark = pytest.mark.django_db
PROFILES = "/api/v1/profiles/"
PROFILE_ADMIN, DEVICE_ADMIN = "/admin/devices/deviceprofile/", "/admin/devices/device/"
EXTEND = {"endpoints": [{"key": "light", "data_type": "number"}]}
RELAY = {"key": "io1", "data_type": "bool", "writable": True, "rpc_method": "setIO"}


def _admin(tenant: Tenant) -> APIClient:
    OrganizationMember.objects.filter(user=tenant.user).update(role=MemberRole.ADMIN)
    return token_client(tenant.user)


def _superuser() -> APIClient:
    return token_client(User.objects.create_superuser("root", "root@example.com", "pw"))


def _org(tenant: Tenant) -> int:
    return tenant.kit.farm.organization_id


def _create(client: APIClient, organization: int | None, name: str) -> Any:
    body = {"organization": organization, "name": name, "endpoints": [RELAY]}
    return client.post(PROFILES, body, format="json")


def _listed(client: APIClient) -> set[int]:
    return {row["id"] for row in client.get(PROFILES).json()["results"]}


def _name_error(response: Any) -> list[str]:
    assert response.status_code == 400, response.content
    fields: dict[str, list[str]] = response.json()["fields"]
    return fields["name"]


@pytest.fixture
def relay4(tenants: tuple[Tenant, Tenant]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Alpha's and beta's "Relay 4", each made over the API by the organisation's admin."""
    alpha, beta = tenants
    mine = _create(_admin(alpha), _org(alpha), "Relay 4")
    theirs = _create(_admin(beta), _org(beta), "Relay 4")
    assert (mine.status_code, theirs.status_code) == (201, 201), (mine.content, theirs.content)
    return mine.json(), theirs.json()


def test_two_organisations_each_have_their_own_relay_4(
    tenants: tuple[Tenant, Tenant], relay4: tuple[dict[str, Any], dict[str, Any]]
) -> None:
    alpha, beta = tenants
    alphas, betas = relay4
    assert alphas["organization"] == _org(alpha) and betas["organization"] == _org(beta)
    assert alphas["id"] != betas["id"]
    assert DeviceProfile.objects.filter(name="Relay 4").count() == 2


def test_another_organisations_profile_is_not_there(
    tenants: tuple[Tenant, Tenant], relay4: tuple[dict[str, Any], dict[str, Any]]
) -> None:
    alpha, beta = tenants
    alphas, betas = relay4
    client = _admin(beta)
    listed = _listed(client)
    assert betas["id"] in listed and alphas["id"] not in listed
    assert alpha.kit.actuator.profile_id not in listed
    url = f"{PROFILES}{alphas['id']}/"
    assert client.get(url).status_code == 404
    assert client.patch(url, {"name": "Mine now"}, format="json").status_code == 404
    assert client.post(f"{url}endpoints/", EXTEND, format="json").status_code == 404
    # Nor can beta make a profile in alpha's name: that organisation does not exist for them.
    made = _create(client, _org(alpha), "Squat")
    assert made.status_code == 400 and "organization" in made.json()["fields"]


def test_a_taken_name_is_only_ever_one_of_the_callers_own(
    tenants: tuple[Tenant, Tenant], relay4: tuple[dict[str, Any], dict[str, Any]]
) -> None:
    alpha, beta = tenants
    client = _admin(beta)
    assert _name_error(_create(client, _org(beta), "Relay 4"))  # beta's own "Relay 4"
    alphas_only = alpha.kit.sensor.profile.name  # a name only alpha has
    assert _create(client, _org(beta), alphas_only).status_code == 201
    other = _create(client, _org(beta), "Relay 5").json()
    renamed = client.patch(f"{PROFILES}{other['id']}/", {"name": alpha.kit.actuator.profile.name})
    assert renamed.status_code == 200
    assert _name_error(client.patch(f"{PROFILES}{other['id']}/", {"name": "Relay 4"}))


def test_a_global_profile_is_listed_for_everyone_and_changed_by_a_superuser_only(
    tenants: tuple[Tenant, Tenant],
) -> None:
    alpha, beta = tenants
    root = _superuser()
    made = _create(root, None, "Relay 4")
    assert made.status_code == 201 and made.json()["organization"] is None
    shared = made.json()["id"]
    assert _name_error(_create(root, None, "Relay 4"))  # unique among the global profiles
    assert _create(root, _org(alpha), "Relay 4").status_code == 201  # alpha's own: another
    for tenant in (alpha, beta):
        assert shared in _listed(_admin(tenant))
    client, url = _admin(beta), f"{PROFILES}{shared}/"
    assert client.get(url).status_code == 200
    assert client.patch(url, {"name": "Mine now"}, format="json").status_code == 403
    assert client.post(f"{url}endpoints/", EXTEND, format="json").status_code == 403
    assert _create(client, None, "My global").status_code == 403
    renamed = root.patch(url, {"name": "Relay 4 global"}, format="json")
    assert renamed.status_code == 200 and renamed.json()["name"] == "Relay 4 global"
    assert root.post(f"{url}endpoints/", EXTEND, format="json").status_code == 201


# Provisioning


def test_a_device_is_refused_another_organisations_profile(
    tenants: tuple[Tenant, Tenant], relay4: tuple[dict[str, Any], dict[str, Any]]
) -> None:
    alpha, beta = tenants
    alphas, _ = relay4
    body = {"farm": beta.kit.farm.pk, "profile": alphas["id"], "serial_number": "B-1"}
    for client in (_admin(beta), _superuser()):  # beta cannot see it; root can, and is refused
        refused = client.post("/api/v1/devices/", body, format="json")
        assert refused.status_code == 400 and "profile" in refused.json()["fields"]
    assert not Device.objects.filter(serial_number="B-1").exists()
    with pytest.raises(ProvisioningRefused) as raised:
        device_create(farm=beta.kit.farm, profile=alpha.kit.sensor.profile, serial_number="B-2")
    assert raised.value.field == "profile"


def test_a_device_may_use_a_global_profile_or_its_organisations(
    tenants: tuple[Tenant, Tenant], relay4: tuple[dict[str, Any], dict[str, Any]]
) -> None:
    _, beta = tenants
    _, betas = relay4
    shared = DeviceProfileFactory()
    ProfileEndpointFactory(profile=shared, key="temp")
    client = _admin(beta)
    for serial, profile in (("B-1", betas["id"]), ("B-2", shared.pk)):
        body = {"farm": beta.kit.farm.pk, "profile": profile, "serial_number": serial}
        made = client.post("/api/v1/devices/", body, format="json")
        assert made.status_code == 201, made.content


# The admin


def _staff(tenant: Tenant, client: Client) -> Client:
    OrganizationMember.objects.filter(user=tenant.user).update(role=MemberRole.ADMIN)
    rows = Permission.objects.filter(content_type__app_label="devices")
    tenant.user.user_permissions.add(*rows)
    client.login(username=tenant.user.username, password="pw")
    return client


def test_staff_see_global_profiles_read_only_and_not_another_organisations(
    client: Client, tenants: tuple[Tenant, Tenant]
) -> None:
    alpha, beta = tenants
    shared = DeviceProfileFactory(name="Shared relay")
    staff = _staff(beta, client)
    page = staff.get(PROFILE_ADMIN).content.decode()
    assert "Shared relay" in page and beta.kit.actuator.profile.name in page
    assert alpha.kit.actuator.profile.name not in page
    opened = staff.get(f"{PROFILE_ADMIN}{shared.pk}/change/")
    assert opened.status_code == 200 and b'name="name"' not in opened.content  # read-only
    refused = staff.post(f"{PROFILE_ADMIN}{shared.pk}/change/", {"name": "Mine now"})
    assert refused.status_code == 403
    assert staff.post(f"{PROFILE_ADMIN}{shared.pk}/delete/", {"post": "yes"}).status_code == 403
    shared.refresh_from_db()
    assert shared.name == "Shared relay"


def test_staff_add_profiles_for_their_organisation_only(
    client: Client, tenants: tuple[Tenant, Tenant]
) -> None:
    alpha, beta = tenants
    staff = _staff(beta, client)
    form = {"name": "Relay 4", **_no_endpoints()}
    unowned = staff.post(f"{PROFILE_ADMIN}add/", form)
    assert unowned.status_code == 200 and b"This field is required" in unowned.content
    theirs = staff.post(f"{PROFILE_ADMIN}add/", {**form, "organization": _org(alpha)})
    assert theirs.status_code == 200 and b"Select a valid choice" in theirs.content
    made = staff.post(f"{PROFILE_ADMIN}add/", {**form, "organization": _org(beta)})
    assert made.status_code == 302, made.content.decode()[:2000]
    assert DeviceProfile.objects.get(name="Relay 4").organization_id == _org(beta)


def _no_endpoints() -> dict[str, str]:
    """An empty endpoints inline (the profile's catalogue, or a device's endpoints)."""
    counts = {"TOTAL": "0", "INITIAL": "0", "MIN_NUM": "0", "MAX_NUM": "1000"}
    return {f"endpoints-{name}_FORMS": value for name, value in counts.items()}


def test_the_device_form_refuses_another_organisations_profile(
    support: Client, tenants: tuple[Tenant, Tenant]
) -> None:
    """Even a superuser, who may pick any profile, cannot give a device another
    organisation's (the form's error on ``profile``)."""
    alpha, beta = tenants
    form = {
        "farm": beta.kit.farm.pk,
        "profile": alpha.kit.sensor.profile_id,
        "serial_number": "ADM-B1",
        "name": "",
        "status": "active",
        **_no_endpoints(),
    }
    refused = support.post(f"{DEVICE_ADMIN}add/", form)
    assert refused.status_code == 200 and b"farm&#x27;s organisation" in refused.content
    assert not Device.objects.filter(serial_number="ADM-B1").exists()
    form["profile"] = beta.kit.sensor.profile_id
    assert support.post(f"{DEVICE_ADMIN}add/", form).status_code == 302
