"""A writable endpoint's safe value, the value it falls back to when a run-time limit ends:
accepted only when the endpoint itself would accept it as a command (type, bounds, allowed
values) and only on a writable endpoint. A bad one is a 400 naming ``safe_value`` (API) or a
form error (admin), and nothing is written; a good one is read back wherever the catalogue is."""

from __future__ import annotations

from typing import Any

import pytest
from django import forms

from common.models import MemberRole, OrganizationMember
from devices.admin import ProfileEndpointForm, ProfileEndpointInline
from devices.models import DeviceProfile, DeviceProfileEndpoint
from devices.services import EndpointSpec, endpoint_spec_problems
from tests.common.auth import token_client
from tests.conftest import Tenant

HEATER = {"key": "heater", "data_type": "bool", "writable": True, "rpc_method": "setIO"}
VALVE = {
    "key": "valve",
    "data_type": "number",
    "writable": True,
    "rpc_method": "setValve",
    "min_value": 0,
    "max_value": 100,
}
MODE = {
    "key": "mode",
    "data_type": "enum",
    "writable": True,
    "rpc_method": "setMode",
    "allowed_values": ["auto", "off"],
}
SENSOR = {"key": "temp", "data_type": "number"}

BAD = [
    pytest.param(SENSOR | {"safe_value": 5}, "writable", id="read-only endpoint"),
    pytest.param(HEATER | {"safe_value": 0}, "type", id="number for a bool"),
    pytest.param(HEATER | {"safe_value": "off"}, "type", id="text for a bool"),
    pytest.param(VALVE | {"safe_value": True}, "type", id="bool for a number"),
    pytest.param(VALVE | {"safe_value": 101}, "max_value", id="above max"),
    pytest.param(VALVE | {"safe_value": -1}, "max_value", id="below min"),
    pytest.param(MODE | {"safe_value": "eco"}, "allowed_values", id="not allowed"),
]


@pytest.mark.parametrize(("entry", "says"), BAD)
def test_a_safe_value_the_endpoint_would_refuse_is_a_problem_of_that_field(
    entry: dict[str, Any], says: str
) -> None:
    problems = endpoint_spec_problems(EndpointSpec(**entry))
    assert set(problems) == {"safe_value"}
    assert says in problems["safe_value"]


@pytest.mark.parametrize(
    "entry",
    [HEATER | {"safe_value": False}, VALVE | {"safe_value": 0}, MODE | {"safe_value": "off"}],
)
def test_a_safe_value_the_endpoint_accepts_is_no_problem(entry: dict[str, Any]) -> None:
    assert endpoint_spec_problems(EndpointSpec(**entry)) == {}


def _admin_client(tenant: Tenant) -> Any:
    OrganizationMember.objects.filter(user=tenant.user).update(role=MemberRole.ADMIN)
    return token_client(tenant.user)


@pytest.mark.django_db
def test_the_api_writes_and_reads_back_safe_values(tenants: tuple[Tenant, Tenant]) -> None:
    alpha, _ = tenants
    client = _admin_client(alpha)
    body = {
        "organization": alpha.kit.farm.organization_id,
        "name": "Greenhouse kit",
        "endpoints": [HEATER | {"safe_value": False}, VALVE | {"safe_value": 12.5}, SENSOR],
    }
    made = client.post("/api/v1/profiles/", body, format="json")
    assert made.status_code == 201, made.content
    safe = {e["key"]: e["safe_value"] for e in made.json()["endpoints"]}
    assert safe == {"heater": False, "valve": 12.5, "temp": None}
    read = client.get(f"/api/v1/profiles/{made.json()['id']}/").json()
    assert {e["key"]: e["safe_value"] for e in read["endpoints"]} == safe
    stored = DeviceProfileEndpoint.objects.get(profile__name="Greenhouse kit", key="heater")
    assert stored.safe_value is False


@pytest.mark.django_db
@pytest.mark.parametrize(("entry", "says"), BAD)
def test_the_api_refuses_a_bad_safe_value_naming_the_field_and_writes_nothing(
    tenants: tuple[Tenant, Tenant], entry: dict[str, Any], says: str
) -> None:
    alpha, _ = tenants
    client = _admin_client(alpha)
    body = {"organization": alpha.kit.farm.organization_id, "name": "Bad", "endpoints": [entry]}
    made = client.post("/api/v1/profiles/", body, format="json")
    assert made.status_code == 400, made.content
    assert made.json()["code"] == "invalid"
    assert "safe_value" in made.json()["fields"]["endpoints"]["0"]
    assert not DeviceProfile.objects.filter(name="Bad").exists()
    profile = alpha.kit.actuator.profile
    extended = client.post(
        f"/api/v1/profiles/{profile.pk}/endpoints/", {"endpoints": [entry]}, format="json"
    )
    assert extended.status_code == 400, extended.content
    assert "safe_value" in extended.json()["fields"]["endpoints"]["0"]
    assert not profile.endpoints.filter(key=entry["key"], safe_value__isnull=False).exists()


def _admin_form(entry: dict[str, Any]) -> forms.ModelForm:  # type: ignore[type-arg]
    form_class = forms.modelform_factory(
        DeviceProfileEndpoint, form=ProfileEndpointForm, fields=ProfileEndpointInline.fields
    )
    data = {k: "true" if v is True else v for k, v in entry.items() if v is not False}
    if "safe_value" in entry:
        data["safe_value"] = forms.JSONField().prepare_value(entry["safe_value"])
    return form_class(data=data)


@pytest.mark.django_db
def test_the_admin_refuses_a_bad_safe_value_on_its_field() -> None:
    refused = _admin_form(VALVE | {"safe_value": 101})
    assert not refused.is_valid()
    assert "safe_value" in refused.errors
    assert _admin_form(VALVE | {"safe_value": 100}).is_valid()
    assert not _admin_form(SENSOR | {"safe_value": 1}).is_valid()
