"""The role matrix, walked: every route of the URL conf that the REST framework serves, every
method it answers, called by each kind of caller (anonymous, a gateway account, a viewer, an
operator, an admin of the row's organisation, an admin of another organisation, a superuser)
on a row of organisation A. Each answer must be what the route's declared need says: 401
anonymous, 403 a role that does not meet it, 404 a row of another organisation, anything but
those (and no 5xx) for a role that meets it. A route without an entry fails here, and the
docs/security.md prints the same matrix (``manage.py role_matrix``)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date
from datetime import time as local_time
from pathlib import Path

import pytest
from django.contrib.auth.models import User
from django.core.cache import cache
from django.db import transaction
from django.db.models import Model
from django.test import override_settings
from django.utils import timezone
from rest_framework.test import APIClient

from alarms.models import Alarm
from alarms.services import alarm_raise
from common.audit.models import AuditEntry
from common.models import MemberRole, OrganizationMember
from common.role_matrix import Route, api_routes, matrix_markdown, uses_role_matrix
from common.roles import ROLES_MEETING, Need
from notifications.models import InboxItem
from reminders.services.user_messages import user_message_create
from rollouts.services.plan import RolloutSpec, rollout_create
from tests.automation.conftest import dispatch, make_intent
from tests.common.auth import token_client
from tests.conftest import make_tenant
from tests.notifications.factories import ChannelPreferenceFactory, ExternalContactFactory
from tests.notifications.test_support import _notification
from tests.reminders.test_api import _setting, _subscription
from tests.scheduler.factories import DueWorkFactory

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("clock_at_fixture_dates")]

ROUTES = api_routes()
CALLERS = ("anonymous", "gateway", "viewer", "operator", "other_admin", "admin", "superuser")
ORG_ROLES = {
    "gateway": MemberRole.GATEWAY,
    "viewer": MemberRole.VIEWER,
    "operator": MemberRole.OPERATOR,
    "admin": MemberRole.ADMIN,
}


@dataclass
class World:
    """Organisation A's rows, one of each kind a route can name, and the callers."""

    rows: dict[type[Model], Model]
    users: dict[str, User | None]
    inbox_item: InboxItem


def _world() -> World:
    alpha, beta = make_tenant("alpha"), make_tenant("beta")
    OrganizationMember.objects.filter(user=beta.user).update(role=MemberRole.ADMIN)
    org = alpha.kit.farm.organization
    users: dict[str, User | None] = {"anonymous": None, "other_admin": beta.user}
    for name, role in ORG_ROLES.items():
        user = User.objects.create_user(username=f"{name}-a", password="pw")
        OrganizationMember.objects.create(user=user, organization=org, role=role)
        users[name] = user
    users["superuser"] = User.objects.create_superuser("root", "root@example.org", "pw")
    alpha.kit.rule()
    intent = dispatch(make_intent(alpha.kit))
    message = user_message_create(
        farm_id=alpha.kit.farm.pk,
        subject="Shearing",
        text="Shearers arrive at 7.",
        channels=["email"],
        recurrence="daily",
        starts_on=date(2026, 12, 1),
        send_time=local_time(6, 0),
        count=5,
    )
    notification = _notification(alpha.kit.farm)
    admin = users["admin"]
    assert admin is not None
    item = InboxItem.objects.create(
        user=admin,
        notification=notification,
        farm=alpha.kit.farm,
        subject="s",
        body="b",
        created_at=timezone.now(),
    )
    scheduled = DueWorkFactory(farm=alpha.kit.farm)
    contact = ExternalContactFactory(farm=alpha.kit.farm, webhook_url="https://93.184.216.34/h")
    rollout = rollout_create(
        organization=org,
        actor=admin,
        spec=RolloutSpec(
            name="vents shut",
            farm_ids=[alpha.kit.farm.pk],
            profile_id=alpha.kit.actuator.profile_id,
            endpoint_key="io1",
            value=False,
            reason="storm",
        ),
    )
    found: list[Model] = [
        org,
        OrganizationMember.objects.get(user=users["viewer"]),
        alpha.kit.farm,
        alpha.kit.actuator,
        alpha.kit.actuator.profile,
        alpha.kit.io1,
        intent.rule,
        intent,
        intent.rule_execution,
        scheduled,
        _setting(alpha.kit.farm),
        _subscription(alpha.kit.farm),
        message,
        notification,
        contact,
        ChannelPreferenceFactory(contact=contact, channel="webhook", enabled=False),
        rollout,
        Alarm.objects.get(
            pk=alarm_raise(
                farm_id=alpha.kit.farm.pk,
                source="device",
                source_id=alpha.kit.sensor.pk,
                type="device_offline",
                severity="major",
                actor="device health",
                now=timezone.now(),
            )
        ),
        AuditEntry.objects.filter(organization_id=org.pk).latest("pk"),
    ]
    return World(rows={type(r): r for r in found}, users=users, inbox_item=item)


def _url(route: Route, world: World) -> str:
    path = "/" + route.path
    if not route.kwargs:
        return path
    if route.name == "inbox-read":
        row: Model = world.inbox_item
    else:
        model = _model_of(route)
        row = world.rows[model]
    for name in route.kwargs:
        path = path.replace(f"<int:{name}>", str(row.pk)).replace(f"<{name}>", str(row.pk))
    return path


def _model_of(route: Route) -> type[Model]:
    """The model a detail route names: its viewset's, or the endpoint of a manual move."""
    queryset = getattr(route.view, "queryset", None)
    if queryset is not None:
        model: type[Model] = queryset.model
        return model
    from devices.models import DeviceInstanceEndpoint

    return DeviceInstanceEndpoint


def _client(user: User | None) -> APIClient:
    return APIClient() if user is None else token_client(user)


def _meets(caller: str, need: Need) -> bool:
    if need is Need.ANYONE:
        return True
    if caller == "anonymous":
        return False
    if need is Need.SIGNED_IN or caller == "superuser":
        return True
    if need is Need.SUPERUSER:
        return False
    role = ORG_ROLES.get(caller, MemberRole.ADMIN)
    return role in ROLES_MEETING[need]


def _expected(route: Route, caller: str) -> str:
    """ "401", "403", "404", or "ok" (anything else below 500)."""
    assert route.need is not None
    if not _meets(caller, route.need):
        return "401" if caller == "anonymous" else "403"
    if route.need is Need.SIGNED_IN and route.kwargs:
        return "ok" if caller == "admin" else "404"  # the caller's own rows: the admin's item
    hidden = caller == "other_admin" and route.kwargs
    return "404" if hidden else "ok"


def _call(client: APIClient, method: str, url: str) -> int:
    """One request whose writes are rolled back, so every caller meets the same rows."""
    with transaction.atomic():
        send = getattr(client, method.lower())
        response = send(url, {}, format="json") if method != "GET" else send(url)
        transaction.set_rollback(True)
    status: int = response.status_code
    return status


def test_every_route_declares_its_need_and_uses_the_matrix() -> None:
    undeclared = [f"{r.method} /{r.path} ({r.action})" for r in ROUTES if r.need is None]
    assert not undeclared, "routes with no entry in their view's required_roles: " + ", ".join(
        undeclared
    )
    outside = sorted({r.view.__name__ for r in ROUTES if not uses_role_matrix(r.view)})
    assert not outside, f"views not checked by RoleMatrix: {outside}"
    assert len(ROUTES) > 60  # the walk found the API, not an empty URL conf


def test_readme_prints_the_matrix() -> None:
    readme = (Path(__file__).resolve().parents[2] / "docs" / "security.md").read_text()
    stale = "docs/security.md's role matrix is stale: manage.py role_matrix"
    assert matrix_markdown() in readme, stale


@override_settings(DEVICE_CREDENTIALS_BACKEND="tests.devices.fake_credentials.FakeBackend")
def test_each_caller_gets_what_the_matrix_says() -> None:
    """One world for every route (each request's writes are rolled back): every wrong answer
    is listed, not only the first."""
    world = _world()
    clients = {caller: _client(world.users[caller]) for caller in CALLERS}
    wrong: list[str] = []
    for route in ROUTES:
        if route.need is None:
            wrong.append(f"{route.method} /{route.path}: no entry in required_roles")
            continue
        url = _url(route, world)
        for caller in CALLERS:
            if caller == "anonymous":
                cache.clear()  # anonymous requests are throttled per address; not the point here
            status = _call(clients[caller], route.method, url)
            expected = _expected(route, caller)
            got = str(status) if status in (401, 403, 404) else "ok" if status < 500 else "5xx"
            if got != expected:
                wrong.append(
                    f"{route.method} {url} (needs {route.need}) as {caller}: {status}, "
                    f"expected {expected}"
                )
    assert not wrong, "\n".join(wrong)
