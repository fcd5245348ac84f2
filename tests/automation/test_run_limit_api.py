"""Run-time limits over the API: a rule's target and its further actions, and a manual command,
take ``max_on_s`` and ``max_on_value``; bad input (a zero or negative duration, a limit on a
read-only endpoint, no value to return to, a value outside the endpoint's constraints) is a
400 naming the field, and nothing is written."""

from __future__ import annotations

from typing import Any

import pytest
from rest_framework.test import APIClient

from automation.models import AutomationRule, DeviceCommand
from devices.models import DeviceInstanceEndpoint
from tests.common.auth import token_client
from tests.conftest import Tenant

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("clock_at_fixture_dates")]
RULES = "/api/v1/rules/"


def _safe(endpoint: DeviceInstanceEndpoint, value: Any) -> None:
    profile_endpoint = endpoint.profile_endpoint
    profile_endpoint.safe_value = value
    profile_endpoint.save(update_fields=["safe_value"])


def _rule(t: Tenant, **overrides: Any) -> dict[str, Any]:
    body = {
        "farm": t.kit.farm.pk,
        "name": "heat",
        "trigger_endpoint": t.kit.temp.pk,
        "operator": "lt",
        "threshold_value": 18,
        "target_endpoint": t.kit.io1.pk,
        "target_value": True,
    }
    return body | overrides


def _fields(response: Any) -> dict[str, Any]:
    assert response.status_code == 400, response.content
    body = response.json()
    assert body["code"] == "invalid"
    fields: dict[str, Any] = body["fields"]
    return fields


def _command(client: APIClient, endpoint_id: int, body: dict[str, Any]) -> Any:
    url = f"/api/v1/endpoints/{endpoint_id}/command/"
    return client.post(url, {"reason": "testing the heater", **body}, format="json")


def test_a_rule_and_its_actions_carry_their_limits(tenants: tuple[Tenant, Tenant]) -> None:
    alpha, _ = tenants
    _safe(alpha.kit.io1, False)
    client = token_client(alpha.user)
    action = {"target_endpoint": alpha.kit.fan.pk, "target_value": 80}
    body = _rule(alpha, max_on_s=1800, actions=[action | {"max_on_s": 60, "max_on_value": 10}])
    created = client.post(RULES, body, format="json")
    assert created.status_code == 201, created.json()
    shown = client.get(f"{RULES}{created.json()['id']}/").json()
    assert (shown["max_on_s"], shown["max_on_value"]) == (1800, None)
    assert [(a["max_on_s"], a["max_on_value"]) for a in shown["actions"]] == [(60, 10)]


@pytest.mark.parametrize(
    ("overrides", "field", "message"),
    [
        ({"max_on_s": 0}, "max_on_s", "1"),
        ({"max_on_s": -5}, "max_on_s", "1"),
        ({"max_on_s": 7 * 86400 + 1}, "max_on_s", "604800"),
        ({"max_on_s": 60, "max_on_value": "on"}, "max_on_value", "value_wrong_type"),
        ({"max_on_value": False}, "max_on_value", "only with max_on_s"),
    ],
)
def test_a_bad_rule_limit_is_a_400_naming_the_field(
    tenants: tuple[Tenant, Tenant], overrides: dict[str, Any], field: str, message: str
) -> None:
    alpha, _ = tenants
    _safe(alpha.kit.io1, False)
    response = token_client(alpha.user).post(RULES, _rule(alpha, **overrides), format="json")
    assert message in " ".join(_fields(response)[field])
    assert not AutomationRule.objects.exists()


def test_a_limit_with_no_value_to_return_to_is_refused(tenants: tuple[Tenant, Tenant]) -> None:
    alpha, _ = tenants  # io1 declares no safe value
    response = token_client(alpha.user).post(RULES, _rule(alpha, max_on_s=60), format="json")
    assert _fields(response)["max_on_value"] == ["required: the endpoint declares no safe_value"]
    assert not AutomationRule.objects.exists()


def test_an_actions_value_outside_its_constraints_is_refused_on_that_row(
    tenants: tuple[Tenant, Tenant],
) -> None:
    alpha, _ = tenants
    _safe(alpha.kit.io1, False)
    action = {"target_endpoint": alpha.kit.fan.pk, "target_value": 80}
    body = _rule(alpha, actions=[action | {"max_on_s": 60, "max_on_value": 150}])
    response = token_client(alpha.user).post(RULES, body, format="json")
    assert _fields(response)["actions"] == [{"max_on_value": ["value_out_of_range"]}]
    assert not AutomationRule.objects.exists()


def test_a_limit_on_a_read_only_endpoint_is_refused(tenants: tuple[Tenant, Tenant]) -> None:
    alpha, _ = tenants
    body = _rule(alpha, target_endpoint=alpha.kit.humidity.pk, target_value=50, max_on_s=60)
    fields = _fields(token_client(alpha.user).post(RULES, body, format="json"))
    assert fields["max_on_s"] == ["only on a writable endpoint"]
    assert not AutomationRule.objects.exists()


def test_a_manual_command_takes_a_limit(tenants: tuple[Tenant, Tenant]) -> None:
    alpha, _ = tenants
    _safe(alpha.kit.io1, False)
    client = token_client(alpha.user)
    response = _command(client, alpha.kit.io1.pk, {"value": True, "max_on_s": 900})
    assert response.status_code == 201, response.content
    command = response.json()["command"]
    assert (command["max_on_s"], command["max_on_value"]) == (900, None)
    stored = DeviceCommand.objects.get(pk=command["id"])
    assert (stored.max_on_s, stored.max_on_value) == (900, None)


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"max_on_s": 0}, "max_on_s"),
        ({"max_on_s": -1}, "max_on_s"),
        ({"max_on_s": 60, "max_on_value": "off"}, "max_on_value"),
        ({"max_on_value": False}, "max_on_value"),
    ],
)
def test_a_bad_manual_limit_is_a_400_naming_the_field(
    tenants: tuple[Tenant, Tenant], body: dict[str, Any], field: str
) -> None:
    alpha, _ = tenants
    _safe(alpha.kit.io1, False)
    response = _command(token_client(alpha.user), alpha.kit.io1.pk, {"value": True, **body})
    assert field in _fields(response)
    assert not DeviceCommand.objects.exists()


def test_a_manual_limit_with_no_value_to_return_to_is_refused(
    tenants: tuple[Tenant, Tenant],
) -> None:
    alpha, _ = tenants
    response = _command(token_client(alpha.user), alpha.kit.io1.pk, {"value": True, "max_on_s": 60})
    assert _fields(response)["max_on_value"] == ["required: the endpoint declares no safe_value"]
    assert not DeviceCommand.objects.exists()


def test_a_manual_limit_outside_the_endpoints_range_is_refused(
    tenants: tuple[Tenant, Tenant],
) -> None:
    alpha, _ = tenants
    body = {"value": 50, "max_on_s": 60, "max_on_value": 101}
    response = _command(token_client(alpha.user), alpha.kit.fan.pk, body)
    assert _fields(response)["max_on_value"] == ["value_out_of_range"]
    assert not DeviceCommand.objects.exists()
