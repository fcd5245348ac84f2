"""The in-app inbox over the API: a user lists their own items and marks them read."""

from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from notifications.models import InboxItem
from notifications.services import notification_deliver, notification_schedule
from tests.notifications.conftest import NOW

pytestmark = pytest.mark.django_db


@pytest.fixture
def delivered(team, due_template):
    for key in ("rem:1", "rem:2"):
        coordinates = notification_schedule(
            source_key=key,
            farm_id=team.farm.pk,
            recipient_policy="farm_members",
            template_name=due_template,
            channels=["inbox"],
            context={"title": key, "who": "you", "due_on": NOW.date(), "due_at": NOW},
            now=NOW,
        )
        for c in coordinates:
            assert notification_deliver(notification_id=c["notification_id"], now=NOW) == "sent"
    return team


def client_for(user):
    client = APIClient()
    client.force_authenticate(user)
    return client


def test_a_user_lists_only_their_own_items_newest_first(delivered):
    response = client_for(delivered.worker).get("/api/v1/inbox/")
    assert response.status_code == 200
    items = response.json()["results"]
    assert [i["subject"] for i in items] == ["rem:2 due 2026-03-01", "rem:1 due 2026-03-01"]
    assert {i["id"] for i in items} == set(
        InboxItem.objects.filter(user=delivered.worker).values_list("pk", flat=True)
    )
    assert items[0]["is_read"] is False and items[0]["farm"] == delivered.farm.pk


def test_mark_read_is_idempotent_and_filters_unread(delivered):
    client = client_for(delivered.worker)
    item = InboxItem.objects.filter(user=delivered.worker).order_by("pk").first()
    first = client.post(f"/api/v1/inbox/{item.pk}/read/")
    assert first.status_code == 200 and first.json()["is_read"] is True
    again = client.post(f"/api/v1/inbox/{item.pk}/read/")
    assert again.json()["read_at"] == first.json()["read_at"]
    unread = client.get("/api/v1/inbox/?unread=1").json()["results"]
    assert [i["id"] for i in unread] != [] and item.pk not in [i["id"] for i in unread]


def test_another_users_item_is_not_found(delivered):
    theirs = InboxItem.objects.filter(user=delivered.owner).first()
    response = client_for(delivered.worker).post(f"/api/v1/inbox/{theirs.pk}/read/")
    assert response.status_code == 404
    theirs.refresh_from_db()
    assert theirs.read_at is None


def test_basic_auth_works_and_anonymous_is_refused(delivered):
    assert APIClient().get("/api/v1/inbox/").status_code in (401, 403)
    client = APIClient()
    client.credentials(
        HTTP_AUTHORIZATION="Basic " + __import__("base64").b64encode(b"worker:pw").decode()
    )
    assert client.get("/api/v1/inbox/").status_code == 200
