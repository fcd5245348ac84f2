"""A dead letter on the event bus reaches the operators through this pipeline, once."""

from __future__ import annotations

import pytest
from django.core import mail
from django.utils import timezone

from events.services.dead_letters import dead_letter_record
from events.states import DeadLetterReason
from notifications.models import InboxItem, MembershipRole, Notification
from tests.common.factories import OrganizationFactory
from tests.notifications.conftest import make_user
from tests.notifications.factories import MembershipFactory

pytestmark = pytest.mark.django_db


def record(key: str = "ping:1") -> int | None:
    return dead_letter_record(
        message={"type": "test.Ping", "idempotency_key": key, "payload": {}},
        event_type="test.Ping",
        idempotency_key=key,
        handler="test.failing",
        reason=DeadLetterReason.RETRIES_EXHAUSTED,
        attempts=5,
        last_error="RuntimeError: broken",
        now=timezone.now(),
    )


def test_operators_and_staff_are_told_by_email_and_inbox_once(
    eager_celery, django_capture_on_commit_callbacks
):
    operator = make_user("operator")
    MembershipFactory(
        user=operator, organization=OrganizationFactory(), role=MembershipRole.OPERATOR
    )
    staff = make_user("staff", is_staff=True)
    make_user("bystander")
    with django_capture_on_commit_callbacks(execute=True):
        dead_letter_id = record()
    with django_capture_on_commit_callbacks(execute=True):
        assert record() is None  # the same dead letter again: no row, no alert

    rows = Notification.objects.filter(source_key=f"dead-letter:{dead_letter_id}")
    assert sorted(rows.values_list("recipient_key", "channel", "status")) == sorted(
        (f"user:{u.pk}", channel, "sent")
        for u in (operator, staff)
        for channel in ("email", "inbox")
    )
    assert sorted(m.to[0] for m in mail.outbox) == [operator.email, staff.email]
    message = mail.outbox[0]
    assert (
        message.subject == f"[farm-core] Dead letter #{dead_letter_id}: test.Ping in test.failing"
    )
    assert "Reason:          retries_exhausted" in message.body
    assert "RuntimeError: broken" in message.body
    assert " UTC" in message.body  # no farm: dates in UTC
    assert InboxItem.objects.filter(user__in=[operator, staff]).count() == 2
