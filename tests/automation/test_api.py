"""REST API: every resource is scoped to the caller's organisations (another organisation's
row is a 404), rules are validated like the safety gates (400 with field errors), and a POST
with an ``Idempotency-Key`` replays its first response."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import User
from rest_framework.test import APIClient

from automation.models import AutomationRule
from devices.models import Telemetry
from scheduler.models import DueWork
from tests.automation.conftest import make_intent
from tests.common.auth import token_client
from tests.conftest import Tenant

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("clock_at_fixture_dates")]


def _client(user: User) -> APIClient:
    return token_client(user)


def _resources(t: Tenant) -> dict[str, int]:
    rule = t.kit.rule()
    intent = make_intent(t.kit)
    return {
        "farms": t.kit.farm.pk,
        "devices": t.kit.actuator.pk,
        "profiles": t.kit.actuator.profile_id,
        "endpoints": t.kit.io1.pk,
        "rules": rule.pk,
        "commands": intent.pk,
        "executions": intent.rule_execution_id,
    }


def test_every_resource_is_404_across_organisations(tenants: tuple[Tenant, Tenant]) -> None:
    alpha, beta = tenants
    mine, theirs = _resources(alpha), _resources(beta)
    client = _client(alpha.user)
    for name, pk in mine.items():
        assert client.get(f"/api/v1/{name}/{pk}/").status_code == 200, name
        listed = [row["id"] for row in client.get(f"/api/v1/{name}/").json()["results"]]
        assert pk in listed and theirs[name] not in listed, name
        assert client.get(f"/api/v1/{name}/{theirs[name]}/").status_code == 404, name
    for name in ("commands", "executions"):
        assert client.get(f"/api/v1/{name}/{mine[name]}/timeline/").status_code == 200
        assert client.get(f"/api/v1/{name}/{theirs[name]}/timeline/").status_code == 404
    assert client.patch(f"/api/v1/rules/{theirs['rules']}/", {"name": "x"}).status_code == 404
    ingest = {"messages": [{"serial": beta.kit.sensor.serial_number, "payload": {"values": {}}}]}
    assert client.post("/api/v1/telemetry/", ingest, format="json").status_code == 404
    assert APIClient().get("/api/v1/farms/").status_code in (401, 403)


def test_command_timeline_over_the_api(tenants: tuple[Tenant, Tenant]) -> None:
    alpha, _ = tenants
    ids = _resources(alpha)
    body = _client(alpha.user).get(f"/api/v1/commands/{ids['commands']}/timeline/").json()
    assert [e["stage"] for e in body["entries"]] == ["telemetry", "event", "execution", "command"]
    assert body["ids"]["commandIntentId"] == ids["commands"]


def _rule(t: Tenant, **overrides: Any) -> dict[str, Any]:
    body = {
        "farm": t.kit.farm.pk,
        "name": "cool down",
        "trigger_endpoint": t.kit.temp.pk,
        "operator": "gt",
        "threshold_value": 30,
        "target_endpoint": t.kit.fan.pk,
        "target_value": 80,
    }
    body.update(overrides)
    return body


def test_invalid_rules_are_400_with_field_errors(tenants: tuple[Tenant, Tenant]) -> None:
    alpha, beta = tenants
    client = _client(alpha.user)
    cases = [
        (_rule(alpha, target_endpoint=alpha.kit.temp.pk), "target_endpoint"),  # not writable
        (_rule(alpha, target_value=150), "target_value"),  # above max 100
        (_rule(alpha, target_endpoint=alpha.kit.mode.pk, target_value="turbo"), "target_value"),
        (_rule(alpha, target_endpoint=beta.kit.fan.pk), "target_endpoint"),  # other org
        (_rule(alpha, operator="between"), "threshold_value_high"),
    ]
    for body, field in cases:
        response = client.post("/api/v1/rules/", body, format="json")
        assert response.status_code == 400, body
        assert field in response.json()["fields"], response.json()
    other_farm = _rule(alpha)
    other_farm["farm"] = alpha.kit.farm.pk
    from tests.devices.factories import make_farm

    sibling = make_farm(farm=None, prefix="sib")
    sibling.farm.organization = alpha.kit.farm.organization
    sibling.farm.save()
    other_farm["target_endpoint"] = sibling.fan.pk
    response = client.post("/api/v1/rules/", other_farm, format="json")
    assert response.status_code == 400 and "target_endpoint" in response.json()["fields"]
    assert AutomationRule.objects.count() == 0
    assert client.post("/api/v1/rules/", _rule(alpha), format="json").status_code == 201


def test_idempotency_key_replays_the_first_response(tenants: tuple[Tenant, Tenant]) -> None:
    alpha, beta = tenants
    client = _client(alpha.user)
    first = client.post("/api/v1/rules/", _rule(alpha), format="json", HTTP_IDEMPOTENCY_KEY="k-1")
    again = client.post("/api/v1/rules/", _rule(alpha), format="json", HTTP_IDEMPOTENCY_KEY="k-1")
    assert first.status_code == again.status_code == 201
    assert again.json() == first.json() and again["Idempotent-Replayed"] == "true"
    assert AutomationRule.objects.count() == 1
    # The key is per user: beta's "k-1" is a different request.
    other = _client(beta.user).post(
        "/api/v1/rules/", _rule(beta), format="json", HTTP_IDEMPOTENCY_KEY="k-1"
    )
    assert other.status_code == 201 and AutomationRule.objects.count() == 2
    payload = {"ts": "2026-11-29T12:00:00Z", "values": {"temp": 12.5}}
    ingest = {"messages": [{"serial": alpha.kit.sensor.serial_number, "payload": payload}]}
    one = client.post("/api/v1/telemetry/", ingest, format="json", HTTP_IDEMPOTENCY_KEY="t-1")
    two = client.post("/api/v1/telemetry/", ingest, format="json", HTTP_IDEMPOTENCY_KEY="t-1")
    assert one.status_code == two.status_code == 202
    assert (
        two.json() == one.json() == {"telemetry": 1, "events": 1, "rejections": 0, "rejected": []}
    )
    reused = client.post("/api/v1/telemetry/", ingest, format="json", HTTP_IDEMPOTENCY_KEY="k-1")
    assert reused.status_code == 422
    assert Telemetry.objects.count() == 1


def test_http_ingest_uses_the_bridge_service(tenants: tuple[Tenant, Tenant]) -> None:
    alpha, _ = tenants
    client = _client(alpha.user)
    serial = alpha.kit.sensor.serial_number
    body = {
        "messages": [
            {"serial": serial, "payload": {"ts": "2026-11-29T12:00:00Z", "values": {"temp": 1}}},
            {"serial": serial, "payload": "not json"},
        ]
    }
    response = client.post("/api/v1/telemetry/", body, format="json")
    assert response.status_code == 202
    assert _counts(response.json()) == (1, 1, 1, [(1, "invalid_json")])
    again = client.post("/api/v1/telemetry/", body, format="json")  # a redelivery
    assert again.status_code == 202  # the good one is a duplicate, not a rejection
    assert _counts(again.json()) == (0, 0, 1, [(1, "invalid_json")])


def _counts(body: dict[str, Any]) -> tuple[int, int, int, list[tuple[int, str]]]:
    rejected = [(r["index"], r["reason"]) for r in body["rejected"]]
    return body["telemetry"], body["events"], body["rejections"], rejected


def test_scheduler_rows_are_for_superusers_and_schema_is_served(
    tenants: tuple[Tenant, Tenant],
) -> None:
    alpha, _ = tenants
    from tests.scheduler.test_admin import _row

    row = _row("report-subscription:api:manual:1")
    assert _client(alpha.user).get(f"/api/v1/scheduler/{row.pk}/").status_code == 404
    root = User.objects.create_superuser("root", "r@example.com", "pw")
    client = _client(root)
    assert client.get(f"/api/v1/scheduler/{row.pk}/").json()["scheduler_key"] == row.scheduler_key
    assert DueWork.objects.count() == 1
    schema = client.get("/api/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json")
    assert schema.status_code == 200
    paths = schema.json()["paths"]
    for path in ("/api/v1/rules/", "/api/v1/commands/{id}/timeline/", "/api/v1/telemetry/"):
        assert path in paths
    assert client.get("/api/docs/").status_code == 200
    diagnostics = _client(alpha.user).get("/api/v1/diagnostics/?window_hours=2").json()
    assert set(diagnostics) == {"retrying", "uncertain", "top_timeouts"}
