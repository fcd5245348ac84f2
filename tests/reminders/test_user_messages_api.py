"""``/api/v1/user-messages/``: an organisation admin schedules, edits and cancels a message
over the API; members read; another organisation's message is a 404 and its farm an unknown
choice; refusals are 400s naming the field; a POST retried with its Idempotency-Key creates
one message; the admin lists messages with their next send and cancels through the service."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime

import pytest
import time_machine
from django.test import Client

from common.models import MemberRole, OrganizationMember
from reminders.models import UserMessage
from scheduler.models import DueWork
from tests.common.auth import token_client
from tests.conftest import Tenant
from tests.notifications.factories import ExternalContactFactory

pytestmark = pytest.mark.django_db
URL = "/api/v1/user-messages/"
NOW = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)


@pytest.fixture(autouse=True)
def _clock() -> Iterator[None]:
    with time_machine.travel(NOW, tick=True):
        yield


@pytest.fixture
def alpha(tenants: tuple[Tenant, Tenant]) -> Tenant:
    alpha, _ = tenants
    OrganizationMember.objects.filter(user=alpha.user).update(role=MemberRole.ADMIN)
    ExternalContactFactory(farm=alpha.kit.farm, name="Vet", email="vet@example.org")
    return alpha


def _body(tenant: Tenant, **overrides: object) -> dict[str, object]:
    body: dict[str, object] = {
        "farm": tenant.kit.farm.pk,
        "subject": "Shearing",
        "text": "Shearers arrive at 7.",
        "channels": ["email"],
        "recipients": "external_contacts",
        "repeat": "daily",
        "starts_on": "2026-03-03",
        "send_time": "06:00",
        "count": 3,
    }
    body.update(overrides)
    return body


def test_an_admin_schedules_edits_and_cancels_a_message(alpha) -> None:
    client = token_client(alpha.user)
    made = client.post(URL, _body(alpha), format="json")
    assert made.status_code == 201, made.json()
    data = made.json()
    assert data["status"] == "active" and data["author"] == alpha.user.pk
    assert data["next_occurrence_on"].startswith("2026-03-03T")
    assert DueWork.objects.filter(scheduler_key__startswith="user-message:").count() == 3
    edited = client.patch(f"{URL}{data['id']}/", {"text": "Shearers arrive at 8."}, format="json")
    assert edited.status_code == 200 and edited.json()["text"] == "Shearers arrive at 8."
    retimed = client.patch(f"{URL}{data['id']}/", {"send_time": "07:30"}, format="json")
    assert retimed.status_code == 200
    assert DueWork.objects.filter(scheduler_key__startswith="user-message:").count() == 3
    cancelled = client.post(f"{URL}{data['id']}/cancel/")
    assert cancelled.status_code == 200 and cancelled.json()["status"] == "cancelled"
    assert cancelled.json()["next_occurrence_on"] is None
    again = client.patch(f"{URL}{data['id']}/", {"text": "x"}, format="json")
    assert again.status_code == 409


def test_a_create_retried_with_its_idempotency_key_is_one_message(alpha) -> None:
    client = token_client(alpha.user)
    first = client.post(URL, _body(alpha), format="json", HTTP_IDEMPOTENCY_KEY="um-1")
    second = client.post(URL, _body(alpha), format="json", HTTP_IDEMPOTENCY_KEY="um-1")
    assert first.status_code == second.status_code == 201
    assert first.json()["id"] == second.json()["id"]
    assert UserMessage.objects.count() == 1


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"count": None}, "until"),
        ({"repeat": "once"}, "until"),
        ({"starts_on": "2026-03-01", "repeat": "once", "count": None}, "starts_on"),
        ({"send_time": "06:00+01:00"}, "send_time"),
        ({"channels": ["fax"]}, "channels"),
        ({"count": 1001}, "count"),
        ({"recipients": "chosen"}, "recipient_users"),
        ({"recipients": "chosen", "recipient_users": [99999]}, "recipient_users"),
        ({"recipient_users": ["1"]}, "recipient_users"),
        ({"subject": ""}, "subject"),
        ({"recipient_users": [1]}, "recipients"),  # names need the policy 'chosen'
        ({"repeat": "monthly"}, "repeat"),
    ],
)
def test_refused_input_is_a_400_naming_the_field(alpha, overrides, field) -> None:
    answer = token_client(alpha.user).post(URL, _body(alpha, **overrides), format="json")
    assert answer.status_code == 400, answer.json()
    assert field in answer.json()["fields"], answer.json()
    assert not UserMessage.objects.exists()


def test_another_organisation_sees_nothing_and_members_only_read(tenants, alpha) -> None:
    _, beta = tenants
    made = token_client(alpha.user).post(URL, _body(alpha), format="json").json()
    other = token_client(beta.user)
    assert other.get(f"{URL}{made['id']}/").status_code == 404
    assert other.post(f"{URL}{made['id']}/cancel/").status_code == 404
    assert other.get(URL).json()["results"] == []
    refused = other.post(URL, _body(alpha), format="json")
    assert refused.status_code == 400 and "farm" in refused.json()["fields"]
    OrganizationMember.objects.filter(user=alpha.user).update(role=MemberRole.VIEWER)
    reader = token_client(alpha.user)
    assert reader.get(URL, {"status": "active"}).json()["results"][0]["id"] == made["id"]
    assert reader.post(f"{URL}{made['id']}/cancel/").status_code == 403
    assert reader.patch(f"{URL}{made['id']}/", {"text": "x"}, format="json").status_code == 403
    assert UserMessage.objects.get().status == "active"


def test_the_farm_of_a_message_cannot_be_changed(alpha) -> None:
    client = token_client(alpha.user)
    made = client.post(URL, _body(alpha), format="json").json()
    answer = client.patch(f"{URL}{made['id']}/", {"farm": made["farm"]}, format="json")
    assert answer.status_code == 400 and "farm" in answer.json()["fields"]


def test_the_admin_lists_messages_and_cancels_them_through_the_service(
    alpha, support: Client
) -> None:
    made = token_client(alpha.user).post(URL, _body(alpha), format="json").json()
    page = support.get("/admin/reminders/usermessage/")
    assert page.status_code == 200 and b"Shearing" in page.content
    answer = support.post(
        "/admin/reminders/usermessage/",
        {
            "action": "cancel_user_messages",
            "_selected_action": [made["id"]],
            "apply": "1",
            "reason": "sent by mistake",
        },
    )
    assert answer.status_code == 302
    assert UserMessage.objects.get().status == "cancelled"
    assert set(
        DueWork.objects.filter(scheduler_key__startswith="user-message:").values_list(
            "status", flat=True
        )
    ) == {"deactivated"}


def _list_queries(client: object) -> tuple[int, list[object]]:
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    with CaptureQueriesContext(connection) as captured:
        response = client.get(URL)  # type: ignore[attr-defined]
    assert response.status_code == 200
    return len(captured.captured_queries), response.json()["results"]


def test_the_list_costs_the_same_queries_for_one_message_or_many(alpha) -> None:
    client = token_client(alpha.user)
    assert client.post(URL, _body(alpha), format="json").status_code == 201
    few, rows = _list_queries(client)
    for n in range(4):
        body = _body(alpha, subject=f"Shearing {n}", send_time=f"0{n + 1}:30")
        assert client.post(URL, body, format="json").status_code == 201
    many, more_rows = _list_queries(client)
    assert len(more_rows) == len(rows) + 4
    assert many == few
    assert all(row["next_occurrence_on"] for row in more_rows)  # each has its next send
