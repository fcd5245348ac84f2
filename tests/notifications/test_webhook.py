"""Webhooks against a real HTTP server on loopback: signed, retried on 5xx, timeouts and 429
(Retry-After honoured), never retried on other 4xx."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest

from notifications.channels.webhook import (
    SIGNATURE_HEADER,
    webhook_signature,
    webhook_signature_verify,
)
from notifications.models import Notification, NotificationAttempt
from notifications.services import notification_deliver, notification_schedule
from notifications.services.contacts import external_contact_webhook_secret_issue
from tests.notifications.conftest import NOW

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _short_timeouts(settings):
    settings.NOTIFY_WEBHOOK_TIMEOUT_S = 0.3
    settings.NOTIFY_BACKOFF_S = (5.0, 20.0)


def hand_off(team, due_template, key="rem:hook"):
    [coordinate] = notification_schedule(
        source_key=key,
        farm_id=team.farm.pk,
        recipient_policy="external_contacts",
        template_name=due_template,
        channels=["webhook"],
        context={"title": "Vaccinate", "who": "you", "due_on": NOW.date(), "due_at": NOW},
        now=NOW,
    )[1:]  # [vet (skipped: no webhook), hook]
    assert coordinate["status"] == "queued"
    return coordinate["notification_id"]


def deliver_when_due(notification_id):
    row = Notification.objects.get(pk=notification_id)
    return notification_deliver(notification_id=notification_id, now=row.next_attempt_at or NOW)


def test_500_then_timeout_then_200_is_sent_after_three_signed_attempts(
    hooked, due_template, webhook_server
):
    webhook_server.script = [500, "hang", 200]
    notification_id = hand_off(hooked, due_template)
    assert deliver_when_due(notification_id) == "retry_scheduled"
    assert deliver_when_due(notification_id) == "retry_scheduled"
    assert deliver_when_due(notification_id) == "sent"

    row = Notification.objects.get(pk=notification_id)
    assert (row.status, row.attempt_count) == ("sent", 3)
    attempts = list(NotificationAttempt.objects.filter(notification=row).order_by("attempt"))
    assert [(a.outcome, a.status_code) for a in attempts] == [
        ("transient_error", 500),
        ("transient_error", None),
        ("sent", 200),
    ]
    assert "timed out" in attempts[1].error.lower()
    assert attempts[1].latency_ms >= 250
    assert len(webhook_server.calls) == 3
    assert all(call.verified for call in webhook_server.calls)
    call = webhook_server.calls[-1]
    payload = json.loads(call.body)
    assert payload["notification_id"] == notification_id
    assert payload["recipient"] == f"contact:{hooked.hook.pk}"
    assert payload["subject"] == row.subject
    assert payload["context"]["due_at"] == NOW.isoformat()  # plain JSON for receivers
    assert call.headers["X-Farm-Notification-Id"] == str(notification_id)
    assert call.headers["X-Farm-Attempt"] == "3"
    assert call.headers["Content-Type"] == "application/json"


def test_400_fails_at_once_without_a_retry(hooked, due_template, webhook_server):
    webhook_server.script = [400]
    notification_id = hand_off(hooked, due_template)
    assert deliver_when_due(notification_id) == "failed"
    row = Notification.objects.get(pk=notification_id)
    assert (row.status, row.status_reason, row.next_attempt_at) == (
        "failed",
        "permanent_error",
        None,
    )
    assert row.last_error.startswith("HTTP 400")
    assert deliver_when_due(notification_id) == "not_queued"
    assert len(webhook_server.calls) == 1


def test_429_waits_for_retry_after(hooked, due_template, webhook_server):
    webhook_server.script = [(429, {"Retry-After": "120"}), (503, {"Retry-After": "1"})]
    notification_id = hand_off(hooked, due_template)
    assert notification_deliver(notification_id=notification_id, now=NOW) == "retry_scheduled"
    row = Notification.objects.get(pk=notification_id)
    assert row.next_attempt_at - NOW >= timedelta(seconds=120)  # longer than the 5 s ladder
    assert deliver_when_due(notification_id) == "retry_scheduled"
    row.refresh_from_db()
    assert row.status_reason == "transient_error" and row.last_error.startswith("HTTP 503")
    assert deliver_when_due(notification_id) == "sent"


def test_a_connection_refused_is_retried(hooked, due_template):
    hooked.hook.webhook_url = "http://127.0.0.1:9/nothing-listens"
    hooked.hook.save()
    notification_id = hand_off(hooked, due_template)
    assert deliver_when_due(notification_id) == "retry_scheduled"
    attempt = NotificationAttempt.objects.get(notification_id=notification_id)
    assert attempt.error.startswith("network error")


def test_a_rotated_secret_signs_with_the_new_one(hooked, due_template, webhook_server):
    notification_id = hand_off(hooked, due_template)
    rotated = external_contact_webhook_secret_issue(contact_id=hooked.hook.pk)
    assert rotated != hooked.hook_secret
    webhook_server.secret = rotated
    assert deliver_when_due(notification_id) == "sent"
    assert webhook_server.calls[0].verified


def test_signature_covers_timestamp_and_body():
    body = b'{"a": 1}'
    header = f"t=1700000000,v1={webhook_signature('k', 1700000000, body)}"
    assert webhook_signature_verify("k", header, body, now=1700000010)
    assert not webhook_signature_verify("k", header, body + b" ", now=1700000010)
    assert not webhook_signature_verify("other", header, body, now=1700000010)
    assert not webhook_signature_verify("k", header, body, now=1700009999)  # replayed late
    assert not webhook_signature_verify("k", "garbage", body)
    assert SIGNATURE_HEADER == "X-Farm-Signature"


def test_retry_after_reads_seconds_and_http_dates():
    from datetime import UTC, datetime
    from email.utils import format_datetime

    from notifications.channels.webhook import _retry_after_s

    assert _retry_after_s("30") == 30.0
    assert _retry_after_s(None) is None and _retry_after_s("soon") is None
    later = format_datetime(datetime.now(UTC) + timedelta(seconds=90), usegmt=True)
    assert 80 <= (_retry_after_s(later) or 0) <= 91
