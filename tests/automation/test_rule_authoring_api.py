"""The rules API takes and returns a rule's priority, condition window, further conditions,
actions and schedules; a write replaces each nested list it names, every refusal is a 400
with the field (or the row) that is wrong, and a page of rules is read in a fixed number of
queries."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from rest_framework.test import APIClient

from automation.models import AutomationRule
from tests.common.auth import token_client
from tests.conftest import Tenant

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("clock_at_fixture_dates")]
RULES = "/api/v1/rules/"


def _body(t: Tenant, **overrides: Any) -> dict[str, Any]:
    body = {
        "farm": t.kit.farm.pk,
        "name": "cool down",
        "priority": 10,
        "condition_window_s": 300,
        "trigger_endpoint": t.kit.temp.pk,
        "operator": "gt",
        "threshold_value": 30,
        "target_endpoint": t.kit.fan.pk,
        "target_value": 80,
        "conditions": [
            {
                "endpoint": t.kit.humidity.pk,
                "operator": "between",
                "threshold_value": 40,
                "threshold_value_high": 90,
            }
        ],
        "actions": [{"target_endpoint": t.kit.io1.pk, "target_value": True}],
        "schedules": [
            {"local_time": "07:00", "weekdays": ["mon", "fri"], "max_lateness_s": 600},
            {"local_time": "18:30:00"},
        ],
    }
    return body | overrides


def _post(client: APIClient, body: dict[str, Any]) -> Any:
    return client.post(RULES, body, format="json")


def test_a_rule_is_written_and_read_with_its_nested_lists(tenants: tuple[Tenant, Tenant]) -> None:
    alpha, _ = tenants
    client = token_client(alpha.user)
    created = _post(client, _body(alpha))
    assert created.status_code == 201, created.json()
    rule = created.json()
    assert (rule["priority"], rule["condition_window_s"]) == (10, 300)
    assert rule["conditions"] == [
        {
            "endpoint": alpha.kit.humidity.pk,
            "operator": "between",
            "threshold_value": 40,
            "threshold_value_high": 90,
        }
    ]
    assert rule["actions"] == [
        {
            "target_endpoint": alpha.kit.io1.pk,
            "target_value": True,
            "max_on_s": None,
            "max_on_value": None,
        }
    ]
    assert rule["schedules"] == [
        {
            "local_time": "07:00:00",
            "weekdays": ["mon", "fri"],
            "max_lateness_s": 600,
            "is_active": True,
        },
        {
            "local_time": "18:30:00",
            "weekdays": ["mon", "tue", "wed", "thu", "fri", "sat", "sun"],
            "max_lateness_s": 900,
            "is_active": True,
        },
    ]
    assert client.get(f"{RULES}{rule['id']}/").json() == rule


def test_a_patch_replaces_the_lists_it_names(tenants: tuple[Tenant, Tenant]) -> None:
    alpha, _ = tenants
    client = token_client(alpha.user)
    rule = _post(client, _body(alpha)).json()
    patched = client.patch(
        f"{RULES}{rule['id']}/", {"schedules": [{"local_time": "06:00"}]}, format="json"
    )
    assert patched.status_code == 200, patched.json()
    body = patched.json()
    assert [s["local_time"] for s in body["schedules"]] == ["06:00:00"]
    assert body["conditions"] == rule["conditions"] and body["actions"] == rule["actions"]
    cleared = client.patch(f"{RULES}{rule['id']}/", {"actions": [], "priority": -3}, format="json")
    assert cleared.json()["actions"] == [] and cleared.json()["priority"] == -3
    # A schedule-only rule: no trigger, its operator and thresholds null.
    only = {"trigger_endpoint": None, "operator": None, "threshold_value": None}
    body = client.patch(f"{RULES}{rule['id']}/", only, format="json").json()
    assert body["trigger_endpoint"] is None and body["operator"] == ""
    refused = client.patch(f"{RULES}{rule['id']}/", {"schedules": []}, format="json")
    assert refused.status_code == 400
    assert refused.json()["fields"] == {
        "trigger_endpoint": ["required unless the rule has a schedule"]
    }


def test_a_bad_row_is_a_400_on_that_row(tenants: tuple[Tenant, Tenant]) -> None:
    alpha, beta = tenants
    client = token_client(alpha.user)
    kit = alpha.kit
    body = _body(
        alpha,
        conditions=[
            {"endpoint": kit.humidity.pk, "operator": "lt", "threshold_value": 70},
            {"endpoint": kit.io1.pk, "operator": "eq", "threshold_value": 1},
        ],
    )
    response = _post(client, body)
    assert response.status_code == 400
    assert response.json()["fields"] == {
        "conditions": [{}, {"threshold_value": ["must be a bool"]}]
    }
    cases: list[tuple[dict[str, Any], str]] = [
        ({"actions": [{"target_endpoint": kit.temp.pk, "target_value": 1}]}, "actions"),
        ({"actions": [{"target_endpoint": beta.kit.fan.pk, "target_value": 1}]}, "actions"),
        ({"schedules": [{"local_time": "07:00+02:00"}]}, "schedules"),
        ({"schedules": [{"local_time": "07:00", "weekdays": []}]}, "schedules"),
        ({"schedules": [{"local_time": "07:00", "weekdays": ["someday"]}]}, "schedules"),
        ({"schedules": [{"local_time": "07:00"}, {"local_time": "07:00:00"}]}, "schedules"),
        ({"schedules": [{"local_time": "07:00", "max_lateness_s": 0}]}, "schedules"),
        ({"priority": 5000}, "priority"),
        ({"condition_window_s": 0}, "condition_window_s"),
        ({"trigger_endpoint": None, "schedules": []}, "trigger_endpoint"),
        ({"trigger_endpoint": None}, "operator"),  # an operator with no trigger
        ({"operator": None}, "operator"),
        ({"target_endpoint": kit.humidity.pk}, "target_endpoint"),
    ]
    for overrides, field in cases:
        response = _post(client, _body(alpha, **overrides))
        assert response.status_code == 400, (overrides, response.status_code)
        assert field in response.json()["fields"], (overrides, response.json())
    assert AutomationRule.objects.count() == 0


def test_a_cycle_is_refused_naming_its_rules(tenants: tuple[Tenant, Tenant]) -> None:
    alpha, _ = tenants
    client = token_client(alpha.user)
    kit = alpha.kit
    plain: dict[str, Any] = {"conditions": [], "actions": [], "schedules": []}
    first = _body(
        alpha,
        name="fan on",
        trigger_endpoint=kit.fan.pk,
        target_endpoint=kit.io1.pk,
        target_value=True,
        **plain,
    )
    assert _post(client, first).status_code == 201
    back = _body(
        alpha,
        name="io1 on",
        trigger_endpoint=kit.io1.pk,
        operator="eq",
        threshold_value=True,
        target_endpoint=kit.mode.pk,
        target_value="auto",
        **(plain | {"actions": [{"target_endpoint": kit.fan.pk, "target_value": 10}]}),
    )
    response = _post(client, back)
    assert response.status_code == 400
    assert response.json()["fields"] == {
        "actions": ["closes a cycle of rules driving each other: 'io1 on' → 'fan on' → 'io1 on'"]
    }


def test_a_page_of_rules_is_read_in_a_fixed_number_of_queries(
    tenants: tuple[Tenant, Tenant],
) -> None:
    alpha, _ = tenants
    client = token_client(alpha.user)

    def page_queries() -> int:
        with CaptureQueriesContext(connection) as captured:
            assert client.get(RULES).status_code == 200
        return len(captured)

    for n in range(2):
        assert _post(client, _body(alpha, name=f"r{n}", priority=n)).status_code == 201
    few = page_queries()
    for n in range(2, 7):
        assert _post(client, _body(alpha, name=f"r{n}", priority=n)).status_code == 201
    rows = client.get(RULES).json()["results"]
    assert len(rows) == 7 and all(len(r["schedules"]) == 2 for r in rows)
    assert page_queries() == few


def test_the_schema_names_the_nested_objects(tenants: tuple[Tenant, Tenant]) -> None:
    alpha, _ = tenants
    schema = (
        token_client(alpha.user)
        .get("/api/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json")
        .json()
    )
    components = schema["components"]["schemas"]
    rule = components["Rule"]["properties"]
    for name, component in [
        ("conditions", "RuleCondition"),
        ("actions", "RuleAction"),
        ("schedules", "RuleSchedule"),
    ]:
        assert rule[name]["items"]["$ref"] == f"#/components/schemas/{component}"
    weekdays = components["RuleSchedule"]["properties"]["weekdays"]["items"]["$ref"]
    enum = components[weekdays.rsplit("/", 1)[1]]["enum"]
    assert enum == ["mon", "tue", "wed", "thu", "fri", "sat", "sun"]
