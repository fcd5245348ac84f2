"""Who may move a device, over the API: what a read-only viewer was once able to do (write
rules, post forged readings, retry commands) is a 403 now, and the role that should still
succeeds (``common.roles``): an operator operates, an admin configures, a gateway account
posts telemetry for its organisation's devices and reads nothing."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import User
from rest_framework.test import APIClient

from automation.models import AutomationRule, DeviceCommand
from automation.services.commands import command_transition
from automation.states import CommandStatus, ReasonCode
from common.models import MemberRole, OrganizationMember
from devices.models import Telemetry
from tests.automation.conftest import dispatch, make_intent
from tests.automation.test_api import _rule
from tests.common.auth import token_client
from tests.conftest import Tenant
from tests.notifications.test_support import _notification
from tests.reminders.test_api import _setting, _subscription

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("clock_at_fixture_dates")]


def _as(t: Tenant, role: str) -> APIClient:
    """A new user of ``t``'s organisation with ``role``, signed in with a token."""
    name = f"{t.user.username}-{role}-{User.objects.count()}"
    user = User.objects.create_user(username=name, password="pw")
    OrganizationMember.objects.create(user=user, organization=t.kit.farm.organization, role=role)
    return token_client(user)


def _reading(t: Tenant, temp: float = 35.0) -> dict[str, Any]:
    payload = {"ts": "2026-11-29T11:59:00Z", "values": {"temp": temp}}
    return {"messages": [{"serial": t.kit.sensor.serial_number, "payload": payload}]}


def test_a_viewer_cannot_create_a_rule_an_admin_can(tenants: tuple[Tenant, Tenant]) -> None:
    alpha, _ = tenants
    viewer = _as(alpha, MemberRole.VIEWER)
    refused = viewer.post("/api/v1/rules/", _rule(alpha), format="json")
    assert refused.status_code == 403, refused.content
    assert refused.json()["code"] == "permission_denied"
    assert not AutomationRule.objects.exists()
    operator = _as(alpha, MemberRole.OPERATOR)
    assert operator.post("/api/v1/rules/", _rule(alpha), format="json").status_code == 403
    made = _as(alpha, MemberRole.ADMIN).post("/api/v1/rules/", _rule(alpha), format="json")
    assert made.status_code == 201, made.content


def test_a_viewer_cannot_rewrite_the_admins_rule(tenants: tuple[Tenant, Tenant]) -> None:
    alpha, _ = tenants
    rule = alpha.kit.rule(threshold_value=30)
    url = f"/api/v1/rules/{rule.pk}/"
    for role in (MemberRole.VIEWER, MemberRole.OPERATOR, MemberRole.GATEWAY):
        response = _as(alpha, role).patch(url, {"threshold_value": -100}, format="json")
        assert response.status_code == 403, (role, response.content)
    rule.refresh_from_db()
    assert rule.threshold_value == 30
    done = _as(alpha, MemberRole.ADMIN).patch(url, {"threshold_value": -100}, format="json")
    assert done.status_code == 200, done.content
    rule.refresh_from_db()
    assert rule.threshold_value == -100


def test_only_a_gateway_or_an_admin_posts_telemetry(tenants: tuple[Tenant, Tenant]) -> None:
    alpha, beta = tenants
    for role in (MemberRole.VIEWER, MemberRole.OPERATOR):
        refused = _as(alpha, role).post("/api/v1/telemetry/", _reading(alpha), format="json")
        assert refused.status_code == 403, (role, refused.content)
    assert not Telemetry.objects.exists()
    gateway = _as(alpha, MemberRole.GATEWAY)
    kept = gateway.post("/api/v1/telemetry/", _reading(alpha), format="json")
    assert kept.status_code == 202, kept.content
    # Another organisation's device is unknown to this gateway.
    theirs = gateway.post("/api/v1/telemetry/", _reading(beta), format="json")
    assert theirs.status_code == 404
    admin = _as(alpha, MemberRole.ADMIN)
    again = admin.post("/api/v1/telemetry/", _reading(alpha, temp=36.0), format="json")
    assert again.status_code == 202, again.content
    assert Telemetry.objects.count() == 2


def test_a_gateway_reads_nothing(tenants: tuple[Tenant, Tenant]) -> None:
    alpha, _ = tenants
    gateway = _as(alpha, MemberRole.GATEWAY)
    for name in ("farms", "devices", "rules", "commands", "organizations", "notifications"):
        assert gateway.get(f"/api/v1/{name}/").status_code == 403, name
    assert gateway.get(f"/api/v1/farms/{alpha.kit.farm.pk}/").status_code == 403


def _ended(t: Tenant) -> DeviceCommand:
    t.kit.rule()
    intent = dispatch(make_intent(t.kit))
    assert command_transition(intent, CommandStatus.FAILED, ReasonCode.MANUAL)
    return DeviceCommand.objects.get(pk=intent.pk)


def test_a_viewer_cannot_retry_a_command_an_operator_can(tenants: tuple[Tenant, Tenant]) -> None:
    alpha, _ = tenants
    ended = _ended(alpha)
    url = f"/api/v1/commands/{ended.pk}/retry/"
    refused = _as(alpha, MemberRole.VIEWER).post(url, {"reason": "relay fixed"}, format="json")
    assert refused.status_code == 403, refused.content
    assert not DeviceCommand.objects.filter(retry_of=ended).exists()
    done = _as(alpha, MemberRole.OPERATOR).post(url, {"reason": "relay fixed"}, format="json")
    assert done.status_code == 201, done.content
    assert DeviceCommand.objects.filter(retry_of=ended).count() == 1


def test_mark_failed_is_an_operators_move(tenants: tuple[Tenant, Tenant]) -> None:
    alpha, _ = tenants
    alpha.kit.rule()
    live = dispatch(make_intent(alpha.kit))
    url = f"/api/v1/commands/{live.pk}/mark-failed/"
    refused = _as(alpha, MemberRole.VIEWER).post(url, {"reason": "stuck"}, format="json")
    assert refused.status_code == 403
    operator = _as(alpha, MemberRole.OPERATOR)
    assert operator.post(url, {}, format="json").status_code == 400  # a reason is required
    done = operator.post(url, {"reason": "stuck"}, format="json")
    assert done.status_code == 200 and done.json()["status"] == CommandStatus.FAILED
    again = operator.post(url, {"reason": "stuck"}, format="json")
    assert again.status_code == 409 and again.json()["code"] == "conflict"


def test_a_viewer_cannot_command_an_endpoint_an_operator_can(
    tenants: tuple[Tenant, Tenant],
) -> None:
    alpha, _ = tenants
    url = f"/api/v1/endpoints/{alpha.kit.io1.pk}/command/"
    body = {"value": True, "reason": "checking the relay"}
    assert _as(alpha, MemberRole.VIEWER).post(url, body, format="json").status_code == 403
    assert _as(alpha, MemberRole.GATEWAY).post(url, body, format="json").status_code == 403
    done = _as(alpha, MemberRole.OPERATOR).post(url, body, format="json")
    assert done.status_code == 201, done.content
    cancel = f"/api/v1/endpoints/{alpha.kit.io1.pk}/hold/cancel/"
    refused = _as(alpha, MemberRole.VIEWER).post(cancel, {"reason": "x"}, format="json")
    assert refused.status_code == 403
    ended = _as(alpha, MemberRole.OPERATOR).post(cancel, {"reason": "done"}, format="json")
    assert ended.status_code == 200, ended.content


def test_reminders_and_report_subscriptions_are_configured_by_an_admin(
    tenants: tuple[Tenant, Tenant],
) -> None:
    alpha, _ = tenants
    setting, subscription = _setting(alpha.kit.farm), _subscription(alpha.kit.farm)
    operator = _as(alpha, MemberRole.OPERATOR)
    patch = {"name": "renamed"}
    for url in (
        f"/api/v1/reminder-settings/{setting.pk}/",
        f"/api/v1/report-subscriptions/{subscription.pk}/",
    ):
        assert operator.patch(url, patch, format="json").status_code == 403, url
    deactivate = f"/api/v1/reminder-settings/{setting.pk}/deactivate/"
    assert operator.post(deactivate).status_code == 403
    setting.refresh_from_db()
    assert setting.active and setting.name != "renamed"
    # Running a report now operates: an operator may, a viewer may not.
    run = f"/api/v1/report-subscriptions/{subscription.pk}/run/"
    assert _as(alpha, MemberRole.VIEWER).post(run, {}, format="json").status_code == 403
    assert operator.post(run, {}, format="json").status_code == 201
    admin = _as(alpha, MemberRole.ADMIN)
    assert admin.post(deactivate).status_code == 200


def test_notifications_retry_and_cancel_need_an_operator(tenants: tuple[Tenant, Tenant]) -> None:
    alpha, _ = tenants
    failed = _notification(alpha.kit.farm, "failed")
    viewer = _as(alpha, MemberRole.VIEWER)
    for move in ("retry", "cancel"):
        url = f"/api/v1/notifications/{failed.pk}/{move}/"
        assert viewer.post(url, {"reason": "x"}, format="json").status_code == 403, move
    failed.refresh_from_db()
    assert failed.status == "failed"
    operator = _as(alpha, MemberRole.OPERATOR)
    url = f"/api/v1/notifications/{failed.pk}/retry/"
    assert operator.post(url, {"reason": "mailbox fixed"}, format="json").status_code == 200


def test_an_admin_elsewhere_is_a_viewer_here(tenants: tuple[Tenant, Tenant]) -> None:
    """Roles are per organisation: admin of beta and viewer of alpha writes only for beta."""
    alpha, beta = tenants
    OrganizationMember.objects.create(
        user=beta.user, organization=alpha.kit.farm.organization, role=MemberRole.VIEWER
    )
    client = token_client(beta.user)
    assert client.post("/api/v1/rules/", _rule(beta), format="json").status_code == 201
    refused = client.post("/api/v1/rules/", _rule(alpha), format="json")
    assert refused.status_code == 403, refused.content
    rule = alpha.kit.rule()
    assert client.get(f"/api/v1/rules/{rule.pk}/").status_code == 200
    moved = client.patch(f"/api/v1/rules/{rule.pk}/", {"name": "x"}, format="json")
    assert moved.status_code == 403
    farm = {"name": "New field", "organization": alpha.kit.farm.organization_id}
    assert client.post("/api/v1/farms/", farm, format="json").status_code == 403
