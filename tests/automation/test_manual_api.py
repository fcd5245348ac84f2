"""Manual control over the API and in the admin: ``POST /api/v1/endpoints/<id>/command/`` and
``…/hold/cancel/`` need an operator of the endpoint's organisation, answer bad input with field
errors in the documented shape and a retired device with a conflict, replay an
``Idempotency-Key``; the endpoint shows ``manual_hold_until``. The device's admin page sets a
value and cancels a hold through the same service."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from rest_framework.test import APIClient

from automation.models import DeviceCommand, EndpointManualHold
from common.audit.models import AuditEntry
from common.models import MemberRole, OrganizationMember
from devices.models import DeviceStatus
from tests.common.auth import token_client
from tests.conftest import Tenant
from tests.devices.factories import make_farm

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("clock_at_fixture_dates")]
DEVICE_URL = "/admin/devices/device/"


def _admin(t: Tenant) -> APIClient:
    OrganizationMember.objects.filter(user=t.user).update(role=MemberRole.ADMIN)
    return token_client(t.user)


def _command(
    client: APIClient, endpoint_id: int, body: dict[str, Any], key: str | None = None
) -> Any:
    extra = {"HTTP_IDEMPOTENCY_KEY": key} if key else {}
    return client.post(f"/api/v1/endpoints/{endpoint_id}/command/", body, format="json", **extra)


def _fields(response: Any) -> dict[str, Any]:
    assert response.status_code == 400, response.content
    body = response.json()
    assert body["code"] == "invalid"
    fields: dict[str, Any] = body["fields"]
    return fields


def test_an_admin_sets_a_value_and_the_endpoint_shows_its_hold(
    tenants: tuple[Tenant, Tenant],
) -> None:
    alpha, _ = tenants
    client = _admin(alpha)
    io1 = alpha.kit.io1
    response = _command(client, io1.pk, {"value": True, "reason": "checking the relay"})
    assert response.status_code == 201, response.content
    body = response.json()
    command = body["command"]
    assert (command["origin"], command["requested_by"], command["request_reason"]) == (
        "manual",
        alpha.user.username,
        "checking the relay",
    )
    assert (command["rule"], command["rule_execution"], command["status"]) == (
        None,
        None,
        "pending_dispatch",
    )
    assert body["manual_hold_until"] is not None
    shown = client.get(f"/api/v1/endpoints/{io1.pk}/").json()
    assert shown["manual_hold_until"] == body["manual_hold_until"]
    listed = client.get("/api/v1/endpoints/", {"device": alpha.kit.actuator.pk}).json()
    holds = {row["key"]: row["manual_hold_until"] for row in listed["results"]}
    assert holds == {"io1": body["manual_hold_until"], "fan": None, "mode": None}
    manual = client.get("/api/v1/commands/", {"origin": "manual"}).json()
    assert [r["id"] for r in manual["results"]] == [command["id"]] and manual["next"] is None
    timeline = client.get(f"/api/v1/commands/{command['id']}/timeline/").json()
    assert timeline["ids"]["requestedBy"] == alpha.user.username
    assert client.get(f"/api/v1/farms/{alpha.kit.farm.pk}/").json()["manual_override_minutes"] == 30


def test_bad_input_is_400_with_field_errors(tenants: tuple[Tenant, Tenant]) -> None:
    alpha, _ = tenants
    client, kit = _admin(alpha), alpha.kit
    assert (
        "value_out_of_range"
        in _fields(_command(client, kit.fan.pk, {"value": 150, "reason": "x"}))["value"][0]
    )
    assert (
        "value_wrong_type"
        in _fields(_command(client, kit.io1.pk, {"value": "on", "reason": "x"}))["value"][0]
    )
    assert (
        "value_not_allowed"
        in _fields(_command(client, kit.mode.pk, {"value": "turbo", "reason": "x"}))["value"][0]
    )
    assert (
        "target_not_writable"
        in _fields(_command(client, kit.temp.pk, {"value": 20, "reason": "x"}))["non_field_errors"][
            0
        ]
    )
    assert set(_fields(_command(client, kit.io1.pk, {"value": True}))) == {"reason"}
    assert set(_fields(_command(client, kit.io1.pk, {"value": True, "reason": " "}))) == {"reason"}
    assert set(_fields(_command(client, kit.io1.pk, {"value": {"a": 1}, "reason": "x"}))) == {
        "value"
    }
    assert set(_fields(_command(client, kit.io1.pk, {"reason": "x"}))) == {"value"}
    assert not DeviceCommand.objects.exists()


def test_a_retired_device_is_a_conflict(tenants: tuple[Tenant, Tenant]) -> None:
    alpha, _ = tenants
    client = _admin(alpha)
    alpha.kit.actuator.status = DeviceStatus.RETIRED
    alpha.kit.actuator.save()
    response = _command(client, alpha.kit.io1.pk, {"value": True, "reason": "x"})
    assert response.status_code == 409
    assert response.json()["code"] == "conflict"
    assert "target_retired" in response.json()["detail"]
    assert not DeviceCommand.objects.exists()


def test_a_viewer_may_not_and_another_organisation_cannot_see(
    tenants: tuple[Tenant, Tenant],
) -> None:
    alpha, beta = tenants
    OrganizationMember.objects.filter(user=alpha.user).update(role=MemberRole.VIEWER)
    member = token_client(alpha.user)  # a viewer: reads, does not operate
    body = {"value": True, "reason": "x"}
    assert _command(member, alpha.kit.io1.pk, body).status_code == 403
    assert _command(_admin(alpha), beta.kit.io1.pk, body).status_code == 404
    cancel = f"/api/v1/endpoints/{beta.kit.io1.pk}/hold/cancel/"
    assert _admin(alpha).post(cancel, {"reason": "x"}, format="json").status_code == 404
    assert APIClient().post(f"/api/v1/endpoints/{alpha.kit.io1.pk}/command/", body).status_code in (
        401,
        403,
    )
    assert not DeviceCommand.objects.exists()


def test_an_idempotency_key_replays_and_creates_one_command(
    tenants: tuple[Tenant, Tenant],
) -> None:
    alpha, _ = tenants
    client = _admin(alpha)
    body = {"value": 40, "reason": "airing"}
    first = _command(client, alpha.kit.fan.pk, body, "k-1")
    again = _command(client, alpha.kit.fan.pk, body, "k-1")
    assert first.status_code == again.status_code == 201
    assert again["Idempotent-Replayed"] == "true"
    assert again.json() == first.json()
    assert DeviceCommand.objects.count() == 1
    other = _command(client, alpha.kit.fan.pk, {**body, "value": 41}, "k-1")
    assert other.status_code == 422
    assert DeviceCommand.objects.count() == 1


def test_cancel_ends_the_hold_once(tenants: tuple[Tenant, Tenant]) -> None:
    alpha, _ = tenants
    client, io1 = _admin(alpha), alpha.kit.io1
    cancel = f"/api/v1/endpoints/{io1.pk}/hold/cancel/"
    assert client.post(cancel, {"reason": "x"}, format="json").status_code == 409
    _command(client, io1.pk, {"value": True, "reason": "test"})
    assert set(_fields(client.post(cancel, {}, format="json"))) == {"reason"}
    response = client.post(cancel, {"reason": "done testing"}, format="json")
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["cancelled_by"] == alpha.user.username and body["cancel_reason"] == "done testing"
    assert client.get(f"/api/v1/endpoints/{io1.pk}/").json()["manual_hold_until"] is None
    assert client.post(cancel, {"reason": "again"}, format="json").status_code == 409


def test_the_endpoint_list_reads_holds_in_constant_queries(
    tenants: tuple[Tenant, Tenant],
) -> None:
    alpha, _ = tenants
    client = _admin(alpha)

    def listing() -> int:
        with CaptureQueriesContext(connection) as queries:
            assert client.get("/api/v1/endpoints/").status_code == 200
        return len(queries)

    _command(client, alpha.kit.io1.pk, {"value": True, "reason": "x"})
    few = listing()
    for _ in range(3):
        kit = make_farm(farm=alpha.kit.farm)
        _command(client, kit.io1.pk, {"value": True, "reason": "x"})
        _command(client, kit.fan.pk, {"value": 10, "reason": "x"})
    assert listing() == few


def _form_key(page: bytes) -> str:
    found = re.search(rb'name="request_key" value="(\w+)"', page)
    assert found, "the form carries no request key"
    return found.group(1).decode()


def test_the_device_page_sets_a_value_once_per_form_and_cancels_the_hold(support: Client) -> None:
    kit = make_farm()
    page = support.get(f"{DEVICE_URL}{kit.actuator.pk}/change/")
    assert page.status_code == 200
    assert b"Manual control" in page.content and b"Set a value" in page.content
    form_url = f"{DEVICE_URL}{kit.actuator.pk}/manual-command/"
    form = support.get(form_url)
    assert form.status_code == 200
    key = _form_key(form.content)
    post = {"endpoint": kit.io1.pk, "value": "true", "reason": "by hand", "request_key": key}
    assert support.post(form_url, post).status_code == 302
    assert support.post(form_url, post).status_code == 302  # a double submit
    (intent,) = DeviceCommand.objects.all()
    assert (intent.origin, intent.target_value, intent.requested_by.username) == (
        "manual",
        True,
        "support",
    )
    page = support.get(f"{DEVICE_URL}{kit.actuator.pk}/change/").content.decode()
    assert "held until" in page and "by support" in page
    refused = support.post(form_url, {**post, "endpoint": kit.fan.pk, "value": "500"})
    assert refused.status_code == 200 and b"value_out_of_range" in refused.content
    assert DeviceCommand.objects.count() == 1
    cancel_url = f"{DEVICE_URL}{kit.actuator.pk}/hold-cancel/"
    assert support.get(cancel_url).status_code == 200
    cancelled = support.post(cancel_url, {"endpoint": kit.io1.pk, "reason": "enough"})
    assert cancelled.status_code == 302
    hold = EndpointManualHold.objects.get(endpoint=kit.io1)
    assert hold.cancelled_at is not None and hold.cancel_reason == "enough"
    entry = AuditEntry.objects.get_for_object(hold).order_by("pk").last()
    assert entry is not None and entry.surface == "admin" and entry.actor is not None
    assert entry.changes["cancel_reason"] == ["", "enough"]


def test_the_device_page_is_scoped(tenants: tuple[Tenant, Tenant], client: Client) -> None:
    alpha, beta = tenants
    client.force_login(alpha.user)
    assert client.get(f"{DEVICE_URL}{beta.kit.actuator.pk}/manual-command/").status_code in (
        302,
        403,
        404,
    )
    assert not DeviceCommand.objects.exists()


def test_the_farm_admin_sets_the_override_period_and_refuses_it_cleared(support: Client) -> None:
    kit = make_farm()
    url = f"/admin/devices/farm/{kit.farm.pk}/change/"
    form = {
        "organization": kit.farm.organization_id,
        "name": kit.farm.name,
        "time_zone": kit.farm.time_zone,
    }
    assert support.post(url, {**form, "manual_override_minutes": "5"}).status_code == 302
    kit.farm.refresh_from_db()
    assert kit.farm.manual_override_minutes == 5
    cleared = support.post(url, {**form, "manual_override_minutes": ""})
    assert cleared.status_code == 200 and b"0 for no hold" in cleared.content
    assert support.post(url, {**form, "manual_override_minutes": "20000"}).status_code == 200
    kit.farm.refresh_from_db()
    assert kit.farm.manual_override_minutes == 5
