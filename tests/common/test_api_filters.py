"""List filters are FilterSets: a value the parameter does not take is a 400 naming it, in
the API's error shape (not an empty list), an empty one is no filter, the existing names and
meanings hold, and the OpenAPI schema documents each parameter."""

from __future__ import annotations

from typing import Any

import pytest

from devices.models import DeviceStatus
from tests.common.auth import token_client
from tests.conftest import Tenant

pytestmark = pytest.mark.django_db

INVALID = [
    ("devices", "farm", "abc"),
    ("devices", "farm", "1.5"),
    ("devices", "farm", "²"),
    ("devices", "farm", str(2**63)),
    ("devices", "status", "bogus"),
    ("devices", "status", "active\x00"),
    ("endpoints", "device", "-1"),
    ("rules", "farm", "x"),
    ("commands", "status", "bogus"),
    ("commands", "device", "x"),
    ("commands", "rule", "x"),
    ("executions", "rule", "x"),
    ("scheduler", "farm", "x"),
    ("scheduler", "status", "bogus"),
    ("scheduler", "automation_type", "bogus"),
    ("scheduler", "trigger_type", "bogus"),
    ("reminder-settings", "farm", "x"),
    ("reminder-settings", "active", "maybe"),
    ("report-subscriptions", "active", "maybe"),
    ("notifications", "status", "bogus"),
    ("notifications", "channel", "pigeon"),
    ("notifications", "farm", "x"),
    ("inbox", "unread", "perhaps"),
    ("members", "organization", "x"),
]


@pytest.mark.parametrize(("resource", "name", "value"), INVALID)
def test_an_invalid_filter_is_a_400_naming_it(
    tenants: tuple[Tenant, Tenant], resource: str, name: str, value: str
) -> None:
    alpha, _ = tenants
    response = token_client(alpha.user).get(f"/api/v1/{resource}/", {name: value})
    assert response.status_code == 400, response.content
    body = response.json()
    assert body["code"] == "invalid" and name in body["fields"], body


def test_valid_filters_keep_their_meaning(tenants: tuple[Tenant, Tenant]) -> None:
    alpha, beta = tenants
    client = token_client(alpha.user)

    def ids(resource: str, **params: Any) -> list[int]:
        response = client.get(f"/api/v1/{resource}/", params)
        assert response.status_code == 200, response.content
        return [row["id"] for row in response.json()["results"]]

    mine = sorted([alpha.kit.sensor.pk, alpha.kit.actuator.pk])
    assert sorted(ids("devices", farm=alpha.kit.farm.pk)) == mine
    assert ids("devices", farm=beta.kit.farm.pk) == []  # another organisation's farm: nothing
    assert sorted(ids("devices", farm="")) == mine  # empty: no filter
    assert sorted(ids("devices", status=DeviceStatus.ACTIVE)) == mine
    assert ids("devices", status=DeviceStatus.RETIRED) == []
    assert len(ids("endpoints", device=alpha.kit.actuator.pk)) == 3
    assert ids("rules", farm=alpha.kit.farm.pk) == []
    for value in ("1", "true", "TRUE", "yes", "0", "false", "no"):
        ids("reminder-settings", active=value)
        ids("inbox", unread=value)


def test_the_schema_documents_the_filters(tenants: tuple[Tenant, Tenant]) -> None:
    alpha, _ = tenants
    schema = (
        token_client(alpha.user)
        .get("/api/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json")
        .json()
    )

    def params(path: str) -> dict[str, Any]:
        listed = schema["paths"][path]["get"].get("parameters", [])
        return {p["name"]: p["schema"] for p in listed if p["in"] == "query"}

    devices = params("/api/v1/devices/")
    assert devices["farm"]["type"] == "integer"
    assert set(devices["status"]["enum"]) == set(DeviceStatus.values)
    assert params("/api/v1/reminder-settings/")["active"]["type"] == "boolean"
    assert params("/api/v1/inbox/")["unread"]["type"] == "boolean"
    assert {"status", "device", "rule"} <= set(params("/api/v1/commands/"))
    assert {"farm", "status", "automation_type", "trigger_type"} <= set(
        params("/api/v1/scheduler/")
    )
    assert {"status", "channel", "farm"} <= set(params("/api/v1/notifications/"))
    assert "organization" in params("/api/v1/members/")
