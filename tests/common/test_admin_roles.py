"""The admin follows the API's role matrix: staff get a group per role (made by a migration),
the group decides which pages and buttons they have, their role in the row's organisation
whether they may use them there. A viewer is refused retry, mark failed, cancel and manual
holds; an operator may; an operator elsewhere is a viewer here."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import Group, User
from django.test import Client

from automation.models import DeviceCommand, EndpointManualHold
from automation.services.commands import command_transition
from automation.states import CommandStatus, ReasonCode
from common.models import MemberRole, OrganizationMember
from common.roles import OPERATE_PERMISSION
from notifications.models import Notification
from tests.automation.conftest import dispatch, make_intent
from tests.conftest import Tenant
from tests.notifications.test_support import _notification

pytestmark = [
    pytest.mark.django_db,
    pytest.mark.usefixtures("clock_at_fixture_dates", "staff_groups"),
]
INTENT_URL = "/admin/automation/devicecommand/"
NOTIFICATION_URL = "/admin/notifications/notification/"


def _staff(t: Tenant, role: str, *, group: str | None = None) -> Client:
    """A staff user in the group of ``group`` (default: the role's) with ``role`` in ``t``'s
    organisation, logged in to the admin."""
    name = f"{role}-{User.objects.count()}"
    user = User.objects.create_user(username=name, password="pw", is_staff=True)
    user.groups.add(Group.objects.get(name=group or role))
    OrganizationMember.objects.create(user=user, organization=t.kit.farm.organization, role=role)
    client = Client()
    assert client.login(username=name, password="pw")
    return client


def _act(client: Client, url: str, action: str, ids: list[int], reason: str) -> Any:
    data = {"action": action, "_selected_action": [str(i) for i in ids], "apply": "1"}
    return client.post(url, {**data, "reason": reason}, follow=True)


def test_the_migration_made_a_group_per_role() -> None:
    groups = {g.name: g for g in Group.objects.prefetch_related("permissions__content_type")}
    assert set(groups) >= {"viewer", "operator", "admin"}

    def perms(name: str) -> set[str]:
        return {f"{p.content_type.app_label}.{p.codename}" for p in groups[name].permissions.all()}

    viewer, operator, admin = perms("viewer"), perms("operator"), perms("admin")
    assert "automation.view_devicecommand" in viewer
    assert not any(p.split(".")[1].startswith(("add_", "change_", "delete_")) for p in viewer)
    assert OPERATE_PERMISSION not in viewer and OPERATE_PERMISSION in operator
    assert operator - viewer == {OPERATE_PERMISSION}
    assert {"automation.change_automationrule", "devices.add_farm"} <= admin
    assert "auth.change_user" not in admin  # users and groups stay the superusers'


def _ended(t: Tenant) -> DeviceCommand:
    t.kit.rule()
    intent = dispatch(make_intent(t.kit))
    assert command_transition(intent, CommandStatus.FAILED, ReasonCode.MANUAL)
    return DeviceCommand.objects.get(pk=intent.pk)


def test_a_viewer_cannot_retry_or_mark_failed_an_operator_can(
    tenants: tuple[Tenant, Tenant],
) -> None:
    alpha, _ = tenants
    ended = _ended(alpha)
    viewer = _staff(alpha, MemberRole.VIEWER)
    page = viewer.get(f"{INTENT_URL}{ended.pk}/change/")
    assert page.status_code == 200 and b"Retry as a new command" not in page.content
    listing = viewer.get(INTENT_URL)
    assert listing.status_code == 200 and b'value="retry"' not in listing.content
    _act(viewer, INTENT_URL, "retry", [ended.pk], "relay fixed")
    assert not DeviceCommand.objects.filter(retry_of=ended).exists()
    operator = _staff(alpha, MemberRole.OPERATOR)
    assert b'value="retry"' in operator.get(INTENT_URL).content
    done = _act(operator, INTENT_URL, "retry", [ended.pk], "relay fixed")
    assert b"1 done, 0 skipped" in done.content
    (retry,) = DeviceCommand.objects.filter(retry_of=ended)
    _act(viewer, INTENT_URL, "mark_failed", [retry.pk], "stuck")
    assert DeviceCommand.objects.get(pk=retry.pk).status != CommandStatus.FAILED
    _act(operator, INTENT_URL, "mark_failed", [retry.pk], "stuck")
    assert DeviceCommand.objects.get(pk=retry.pk).status == CommandStatus.FAILED


def test_an_operators_group_does_not_operate_where_the_role_is_viewer(
    tenants: tuple[Tenant, Tenant],
) -> None:
    alpha, _ = tenants
    ended = _ended(alpha)
    client = _staff(alpha, MemberRole.VIEWER, group="operator")
    _act(client, INTENT_URL, "retry", [ended.pk], "relay fixed")
    assert not DeviceCommand.objects.filter(retry_of=ended).exists()
    device_url = f"/admin/devices/device/{alpha.kit.actuator.pk}/manual-command/"
    assert client.get(device_url).status_code == 403


def test_a_viewer_cannot_hold_an_endpoint_by_hand(tenants: tuple[Tenant, Tenant]) -> None:
    alpha, _ = tenants
    url = f"/admin/devices/device/{alpha.kit.actuator.pk}/manual-command/"
    viewer = _staff(alpha, MemberRole.VIEWER)
    assert viewer.get(url).status_code == 403
    body = {"endpoint": alpha.kit.io1.pk, "value": "true", "reason": "x", "request_key": "k1"}
    assert viewer.post(url, body).status_code == 403
    assert not EndpointManualHold.objects.exists()
    operator = _staff(alpha, MemberRole.OPERATOR)
    assert operator.get(url).status_code == 200
    operator.post(url, {**body, "request_key": "k2"})
    assert EndpointManualHold.objects.filter(endpoint=alpha.kit.io1).exists()


def test_a_viewer_cannot_cancel_a_notification(tenants: tuple[Tenant, Tenant]) -> None:
    alpha, _ = tenants
    failed = _notification(alpha.kit.farm, "failed")
    _act(_staff(alpha, MemberRole.VIEWER), NOTIFICATION_URL, "cancel", [failed.pk], "spam")
    assert Notification.objects.get(pk=failed.pk).status == "failed"
    _act(_staff(alpha, MemberRole.OPERATOR), NOTIFICATION_URL, "cancel", [failed.pk], "spam")
    assert Notification.objects.get(pk=failed.pk).status == "cancelled"


def test_configuring_in_the_admin_needs_the_admin_role(tenants: tuple[Tenant, Tenant]) -> None:
    alpha, _ = tenants
    rule = alpha.kit.rule()
    url = f"/admin/automation/automationrule/{rule.pk}/change/"
    operator = _staff(alpha, MemberRole.OPERATOR)
    assert operator.get(url).status_code == 200  # read-only for an operator
    assert operator.post(url, {"name": "renamed"}).status_code == 403
    rule.refresh_from_db()
    assert rule.name != "renamed"
    assert (
        _staff(alpha, MemberRole.VIEWER, group="admin").get("/admin/devices/farm/add/").status_code
        == 403
    )
    assert _staff(alpha, MemberRole.ADMIN).get("/admin/devices/farm/add/").status_code == 200
