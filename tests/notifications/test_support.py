"""Support's moves on notifications: retry and cancel over the API and in the admin record
who and why; a failed row lists its attempts."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.utils import timezone
from rest_framework.test import APIClient

from devices.models import Farm
from notifications.models import Notification, NotificationAttempt, NotificationTransition
from tests.common.auth import token_client
from tests.conftest import Tenant

pytestmark = pytest.mark.django_db


def _client(user: User) -> APIClient:
    return token_client(user)


def _notification(farm: Farm, status: str = "failed", key: str = "src:1") -> Notification:
    now = timezone.now()
    return Notification.objects.create(
        source_key=f"{key}:{farm.pk}",
        recipient_key="contact:1",
        channel="email",
        farm=farm,
        address="vet@example.org",
        template_name="document_expiry",
        status=status,
        status_reason="permanent_error" if status == "failed" else "queued",
        attempt_count=1 if status == "failed" else 0,
        created_at=now,
        updated_at=now,
    )


def test_notification_retry_and_cancel_record_actor_and_reason(
    tenants: tuple[Tenant, Tenant],
) -> None:
    alpha, _ = tenants
    client = _client(alpha.user)
    failed = _notification(alpha.kit.farm, "failed", key="a")
    queued = _notification(alpha.kit.farm, "queued", key="b")
    NotificationAttempt.objects.create(
        notification=failed,
        attempt=1,
        started_at=timezone.now(),
        error="550 no such mailbox",
        outcome="permanent_error",
    )
    listed = client.get("/api/v1/notifications/", {"status": "failed", "channel": "email"})
    assert [row["id"] for row in listed.json()["results"]] == [failed.pk]
    detail = client.get(f"/api/v1/notifications/{failed.pk}/").json()
    assert detail["attempts"][0]["error"] == "550 no such mailbox"

    assert client.post(f"/api/v1/notifications/{failed.pk}/retry/", {}).status_code == 400
    retried = client.post(f"/api/v1/notifications/{failed.pk}/retry/", {"reason": "fixed"})
    assert retried.status_code == 200 and retried.json()["status"] == "queued"
    assert retried.json()["transitions"][-1]["actor"] == "alpha"
    cancelled = client.post(f"/api/v1/notifications/{queued.pk}/cancel/", {"reason": "asked"})
    assert cancelled.status_code == 200 and cancelled.json()["status"] == "cancelled"
    audit = NotificationTransition.objects.order_by("pk")
    assert [(t.notification_id, t.reason, t.actor, t.detail) for t in audit] == [
        (failed.pk, "support_retry", "alpha", "fixed"),
        (queued.pk, "support_cancelled", "alpha", "asked"),
    ]
    # A cancelled row cannot be cancelled again: 409, nothing recorded.
    again = client.post(f"/api/v1/notifications/{queued.pk}/cancel/", {"reason": "twice"})
    assert again.status_code == 409
    assert NotificationTransition.objects.count() == 2


def test_superuser_admin_cancel(client: Client, tenants: tuple[Tenant, Tenant]) -> None:
    alpha, _ = tenants
    User.objects.create_superuser("root", "r@example.com", "pw")
    client.login(username="root", password="pw")
    queued = _notification(alpha.kit.farm, "queued", key="c")
    url = "/admin/notifications/notification/"
    data: dict[str, Any] = {
        "action": "cancel",
        "_selected_action": [str(queued.pk)],
        "apply": "1",
        "reason": "duplicate",
    }
    client.post(url, data, follow=True)
    queued.refresh_from_db()
    assert (queued.status, queued.status_detail) == ("cancelled", "duplicate")


def test_the_notification_list_pages_newest_first_by_cursor(
    tenants: tuple[Tenant, Tenant],
) -> None:
    """Append-heavy: a page is an index range by id, with next/previous links and no count
    (no COUNT(*), no OFFSET); filters hold across pages."""
    alpha, beta = tenants
    client = _client(alpha.user)
    made = [_notification(alpha.kit.farm, "failed", key=f"n{i}") for i in range(5)]
    _notification(alpha.kit.farm, "queued", key="other-status")
    _notification(beta.kit.farm, "failed", key="theirs")
    first = client.get("/api/v1/notifications/", {"status": "failed", "page_size": 2}).json()
    assert set(first) == {"next", "previous", "results"}
    assert first["previous"] is None
    seen = [row["id"] for row in first["results"]]
    page = first
    while page["next"]:
        page = client.get(page["next"]).json()
        seen += [row["id"] for row in page["results"]]
    assert seen == [n.pk for n in reversed(made)]
    back = client.get(page["previous"]).json()
    assert [row["id"] for row in back["results"]] == [made[2].pk, made[1].pk]
    assert client.get("/api/v1/notifications/", {"cursor": "bogus"}).status_code == 404
