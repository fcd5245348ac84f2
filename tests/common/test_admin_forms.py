"""Admin forms as a staff user of organisation A: every foreign-key choice offers only A's rows,
and a crafted POST naming B's organisation, farm, device, endpoint or user is refused with
nothing written; what A may do in A still works."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib import admin
from django.contrib.auth.models import Permission, User
from django.core.exceptions import PermissionDenied
from django.test import Client, RequestFactory

from automation.models import AutomationRule
from common.admin import OrgScopedAdmin
from common.models import Organization, OrganizationMember
from devices.admin import FarmAdmin
from devices.models import Device, DeviceInstanceEndpoint, Farm
from tests.common.conftest import BETA_FARM, BETA_ORG, BETA_PROFILE
from tests.conftest import Tenant

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("clock_at_fixture_dates")]
MEMBER_URL = "/admin/common/organizationmember/"
FARM_URL = "/admin/devices/farm/"
DEVICE_URL = "/admin/devices/device/"
RULE_URL = "/admin/automation/automationrule/"


def _staff(client: Client, tenant: Tenant, *models: str) -> None:
    """Log ``tenant``'s staff user in with view, add and change on ``models``."""
    codenames = [f"{verb}_{model}" for model in models for verb in ("view", "add", "change")]
    tenant.user.user_permissions.add(*Permission.objects.filter(codename__in=codenames))
    client.login(username=tenant.user.username, password="pw")


def _errors(page: Any) -> dict[str, Any]:
    assert page.status_code == 200, page.status_code
    return dict(page.context["adminform"].form.errors)


def _rule_form(tenant: Tenant, **overrides: Any) -> dict[str, Any]:
    form = {
        "farm": tenant.kit.farm.pk,
        "name": "vent",
        "trigger_endpoint": tenant.kit.temp.pk,
        "operator": "gt",
        "threshold_value": "30",
        "threshold_value_high": "null",
        "target_endpoint": tenant.kit.io1.pk,
        "target_value": "true",
        "is_active": "on",
    }
    return form | overrides


def test_a_staff_user_cannot_add_themselves_to_another_organisation(
    client: Client, named: tuple[Tenant, Tenant]
) -> None:
    alpha, beta = named
    _staff(client, alpha, "organizationmember")
    page = client.get(f"{MEMBER_URL}add/")
    assert BETA_ORG.encode() not in page.content
    assert b">beta<" not in page.content  # nor B's users
    crafted = {"user": alpha.user.pk, "organization": beta.kit.farm.organization_id}
    assert "organization" in _errors(client.post(f"{MEMBER_URL}add/", crafted))
    their_user = {"user": beta.user.pk, "organization": alpha.kit.farm.organization_id}
    assert "user" in _errors(client.post(f"{MEMBER_URL}add/", their_user))
    assert not OrganizationMember.objects.filter(user=alpha.user, organization__name=BETA_ORG)
    assert not OrganizationMember.objects.filter(user=beta.user).exclude(
        organization__name=BETA_ORG
    )


def test_a_staff_user_cannot_create_a_farm_in_another_organisation(
    client: Client, named: tuple[Tenant, Tenant]
) -> None:
    alpha, beta = named
    _staff(client, alpha, "farm")
    assert BETA_ORG.encode() not in client.get(f"{FARM_URL}add/").content
    crafted = {"organization": beta.kit.farm.organization_id, "name": "x", "time_zone": "UTC"}
    assert "organization" in _errors(client.post(f"{FARM_URL}add/", crafted))
    mine = {"organization": alpha.kit.farm.organization_id, "name": "x", "time_zone": "UTC"}
    assert client.post(f"{FARM_URL}add/", mine).status_code == 302
    assert list(Farm.objects.filter(name="x").values_list("organization_id", flat=True)) == [
        alpha.kit.farm.organization_id
    ]


def test_a_staff_user_cannot_put_a_device_on_another_organisations_farm_or_profile(
    client: Client, named: tuple[Tenant, Tenant]
) -> None:
    alpha, beta = named
    _staff(client, alpha, "device")
    page = client.get(f"{DEVICE_URL}add/")
    assert BETA_FARM.encode() not in page.content
    assert BETA_PROFILE.encode() not in page.content
    empty = {
        "endpoints-TOTAL_FORMS": "0",
        "endpoints-INITIAL_FORMS": "0",
        "name": "",
        "status": "active",
    }
    crafted = empty | {
        "farm": beta.kit.farm.pk,
        "profile": beta.kit.actuator.profile_id,
        "serial_number": "X-1",
    }
    assert {"farm", "profile"} <= set(_errors(client.post(f"{DEVICE_URL}add/", crafted)))
    mine = crafted | {"farm": alpha.kit.farm.pk, "profile": alpha.kit.actuator.profile_id}
    assert client.post(f"{DEVICE_URL}add/", mine).status_code == 302
    assert Device.objects.get(serial_number="X-1").farm_id == alpha.kit.farm.pk


def test_an_inline_row_cannot_name_another_organisations_endpoint(
    client: Client, named: tuple[Tenant, Tenant]
) -> None:
    alpha, beta = named
    _staff(client, alpha, "device", "deviceinstanceendpoint")
    relay = alpha.kit.actuator
    saved = list(DeviceInstanceEndpoint.objects.filter(device=relay).order_by("pk"))
    rows = [
        {"id": e.pk, "device": relay.pk, "profile_endpoint": e.profile_endpoint_id} for e in saved
    ]
    rows.append({"device": relay.pk, "profile_endpoint": beta.kit.fan.profile_endpoint_id})
    form: dict[str, Any] = {
        "farm": relay.farm_id,
        "profile": relay.profile_id,
        "serial_number": relay.serial_number,
        "name": "",
        "endpoints-TOTAL_FORMS": str(len(rows)),
        "endpoints-INITIAL_FORMS": str(len(saved)),
    }
    for n, row in enumerate(rows):
        form.update({f"endpoints-{n}-{field}": value for field, value in row.items()})
    page = client.post(f"{DEVICE_URL}{relay.pk}/change/", form)
    assert page.status_code == 200
    assert "profile_endpoint" in page.context["inline_admin_formsets"][0].formset.errors[-1]
    assert DeviceInstanceEndpoint.objects.filter(device=relay).count() == len(saved)


def test_a_staff_user_cannot_make_rules_on_another_organisations_farm_or_endpoints(
    client: Client, named: tuple[Tenant, Tenant]
) -> None:
    alpha, beta = named
    _staff(client, alpha, "automationrule")
    page = client.get(f"{RULE_URL}add/")
    assert BETA_FARM.encode() not in page.content
    on_their_farm = _rule_form(beta)
    errors = _errors(client.post(f"{RULE_URL}add/", on_their_farm))
    assert {"farm", "trigger_endpoint", "target_endpoint"} <= set(errors)
    at_their_endpoints = _rule_form(
        alpha, trigger_endpoint=beta.kit.temp.pk, target_endpoint=beta.kit.io1.pk
    )
    page = client.post(f"{RULE_URL}add/", at_their_endpoints)
    assert {"trigger_endpoint", "target_endpoint"} <= set(_errors(page))
    assert f"<strong>{beta.kit.temp}</strong>".encode() not in page.content  # B's id: no label
    assert not AutomationRule.objects.exists()
    assert client.post(f"{RULE_URL}add/", _rule_form(alpha)).status_code == 302
    rule = AutomationRule.objects.get()
    moved = _rule_form(alpha, target_endpoint=beta.kit.io1.pk)
    assert "target_endpoint" in _errors(client.post(f"{RULE_URL}{rule.pk}/change/", moved))
    assert AutomationRule.objects.get().target_endpoint_id == alpha.kit.io1.pk


class _LooseFarmAdmin(FarmAdmin):
    """A farm admin whose form forgot the scope: the save must still refuse."""

    def get_field_queryset(self, db: Any, db_field: Any, request: Any) -> Any:
        return db_field.remote_field.model._default_manager.all()


class _OpenOrganizationAdmin(OrgScopedAdmin):
    org_path = "pk"
    fields = ("name",)


def _post(user: User, data: dict[str, Any]) -> Any:
    request = RequestFactory().post("/", data)
    request.user = user
    request._dont_enforce_csrf_checks = True  # type: ignore[attr-defined]
    return request


def test_a_save_past_a_form_that_forgot_the_scope_is_refused_and_rolled_back(
    named: tuple[Tenant, Tenant],
) -> None:
    alpha, beta = named
    codenames = ["add_farm", "view_farm", "add_organization", "view_organization"]
    alpha.user.user_permissions.add(*Permission.objects.filter(codename__in=codenames))
    alpha.user = User.objects.get(pk=alpha.user.pk)  # permissions are cached per instance
    loose = _LooseFarmAdmin(Farm, admin.site)
    crafted = {"organization": beta.kit.farm.organization_id, "name": "x", "time_zone": "UTC"}
    with pytest.raises(PermissionDenied):
        loose.add_view(_post(alpha.user, crafted))
    assert not Farm.objects.filter(name="x").exists()
    # A row the user could not see once saved (an organisation they are no member of).
    with pytest.raises(PermissionDenied):
        _OpenOrganizationAdmin(Organization, admin.site).add_view(_post(alpha.user, {"name": "Z"}))
    assert not Organization.objects.filter(name="Z").exists()
