"""Delivery: each message leaves once however often the hand-off runs or the task is
redelivered; rendering uses the farm's zone and locale and fails loudly; transient errors
retry on the ladder within a budget; a lost worker's claim is recovered; support can retry
and cancel."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from typing import ClassVar

import pytest
from django.core import mail

from notifications.channels import Delivery, NotificationChannel, Recipient, SendResult
from notifications.channels.base import channel_override
from notifications.models import (
    InboxItem,
    Notification,
    NotificationAttempt,
    NotificationTransition,
)
from notifications.services import (
    Attachment,
    DeliveryOutcome,
    notification_cancel,
    notification_deliver,
    notification_retry,
    notification_schedule,
    notifications_sweep,
)
from notifications.services.moves import notification_move
from notifications.states import NotificationReason, NotificationStatus
from notifications.tasks import notification_deliver_task, notifications_sweep_task
from tests.notifications.conftest import NOW, write_template
from tests.notifications.factories import ChannelPreferenceFactory, NotificationProfileFactory

pytestmark = pytest.mark.django_db

DUE_AT = datetime(2026, 3, 2, 1, 30, tzinfo=UTC)  # 08:30 in Ho Chi Minh City (UTC+7)


def schedule(team, template, *, channels=("email",), policy="everyone", key="rem:1", **context):
    full = {"title": "Vaccinate", "who": "team", "due_on": date(2026, 3, 2), "due_at": DUE_AT}
    full.update(context)
    return notification_schedule(
        source_key=key,
        farm_id=team.farm.pk,
        recipient_policy=policy,
        template_name=template,
        channels=list(channels),
        context=full,
        attachments=[Attachment("report.csv", "text/csv", "batch,dose\nB1,2\n")],
        now=NOW,
    )


def queued_ids(coordinates):
    return [c["notification_id"] for c in coordinates if c["status"] == "queued"]


def test_hand_off_thrice_and_redelivered_tasks_send_each_message_once(
    hooked, due_template, webhook_server, eager_celery, django_capture_on_commit_callbacks
):
    for _ in range(3):  # the scheduler re-runs the hand-off (retried task, replayed event)
        with django_capture_on_commit_callbacks(execute=True):
            coordinates = schedule(hooked, due_template, channels=("email", "webhook", "inbox"))
    for notification_id in [c["notification_id"] for c in coordinates] * 2:
        notification_deliver_task.delay(notification_id)  # the broker redelivers
    notifications_sweep_task.delay()

    users = [hooked.owner, hooked.manager, hooked.worker]
    assert sorted(m.to[0] for m in mail.outbox) == sorted(
        [u.email for u in users] + [hooked.vet.email]
    )
    assert len(webhook_server.calls) == 1 and webhook_server.calls[0].verified
    assert sorted(InboxItem.objects.values_list("user_id", flat=True)) == sorted(
        u.pk for u in users
    )
    # The re-run hand-offs report the rows' current state: already sent.
    assert {c["status"] for c in coordinates} == {"sent", "skipped"}
    sent = Notification.objects.filter(status="sent").count()
    assert sent == len(users) * 2 + 2  # email + inbox per user, vet's email, the webhook
    assert NotificationAttempt.objects.count() == sent


def test_a_task_redelivered_while_the_row_is_being_sent_does_nothing(team, due_template):
    [notification_id, *_] = queued_ids(schedule(team, due_template))
    row = Notification.objects.get(pk=notification_id)
    assert notification_move(
        row,
        NotificationStatus.SENDING,
        NotificationReason.CLAIMED,
        now=NOW,
        attempt_count=1,
        lease_expires_at=NOW + timedelta(minutes=2),
    )
    assert notification_deliver(notification_id=notification_id, now=NOW) == "not_queued"
    assert mail.outbox == []


def test_email_renders_dates_in_the_farm_zone_with_the_csv_attached(team, due_template):
    for notification_id in queued_ids(schedule(team, due_template, policy="farm_managers")):
        assert notification_deliver(notification_id=notification_id, now=NOW) == "sent"
    message = mail.outbox[0]
    assert message.subject == "Vaccinate due 2026-03-02"
    assert message.body == "Hello team, Vaccinate is due at 2026-03-02 08:30 +07.\n"
    assert message.alternatives[0][0] == "<p>Vaccinate &amp; 08:30</p>"
    assert message.attachments[0] == ("report.csv", "batch,dose\nB1,2\n", "text/csv")
    row = Notification.objects.get(pk=message.extra_headers["X-Farm-Notification-Id"])
    assert message.extra_headers["Message-ID"].startswith(f"<notification-{row.pk}@")
    assert (row.status, row.subject, row.sent_at) == ("sent", message.subject, NOW)


def test_dates_follow_the_farm_locale(team, templates):
    write_template(
        templates, "locale_test", subject_txt="Due {{ due_on }}", body_txt="At {{ due_at }}"
    )
    NotificationProfileFactory(farm=team.farm, locale="de")
    [notification_id] = queued_ids(schedule(team, "locale_test", policy="farm_managers")[:1])
    notification_deliver(notification_id=notification_id, now=NOW)
    assert mail.outbox[0].subject == "Due 2. März 2026"
    assert mail.outbox[0].body == "At 2. März 2026 08:30\n"


@pytest.mark.parametrize(
    ("files", "reason", "detail"),
    [
        (
            {"subject_txt": "Hi"},
            "template_missing",
            "template_missing: notifications/broken/body.txt",
        ),
        (
            {"subject_txt": "Hi {{ who }}", "body_txt": "Expires {{ expires_on }}"},
            "template_variable_missing",
            "template_variable_missing: expires_on",
        ),
        (
            {"subject_txt": "Hi", "body_txt": "{% if %}"},
            "template_error",
            "template_error: notifications/broken/body.txt",
        ),
    ],
)
def test_a_broken_template_fails_with_a_clear_reason_and_sends_nothing(
    team, templates, files, reason, detail
):
    write_template(templates, "broken", **files)
    [notification_id] = queued_ids(schedule(team, "broken", policy="farm_managers"))[:1]
    assert notification_deliver(notification_id=notification_id, now=NOW) == "failed"
    row = Notification.objects.get(pk=notification_id)
    assert (row.status, row.status_reason) == ("failed", reason)
    assert row.status_detail.startswith(detail)
    assert row.body == "" and mail.outbox == []
    attempt = NotificationAttempt.objects.get(notification=row)
    assert (attempt.outcome, attempt.error) == ("permanent_error", row.status_detail)


def test_a_missing_template_directory_is_named(team):
    [notification_id] = queued_ids(schedule(team, "no_such_template", policy="farm_managers"))[:1]
    notification_deliver(notification_id=notification_id, now=NOW)
    row = Notification.objects.get(pk=notification_id)
    assert row.status_detail == "template_missing: notifications/no_such_template/subject.txt"


def test_missing_names_are_allowed_where_django_tolerates_them(team, templates):
    write_template(
        templates,
        "optional",
        subject_txt="Hi{% if nickname %} {{ nickname }}{% endif %}",
        body_txt="{% for item in items %}{{ item }}{% empty %}nothing{% endfor %}",
    )
    [notification_id] = queued_ids(schedule(team, "optional", policy="farm_managers"))[:1]
    assert notification_deliver(notification_id=notification_id, now=NOW) == "sent"
    assert (mail.outbox[0].subject, mail.outbox[0].body) == ("Hi", "nothing\n")


@dataclass
class FlakyChannel(NotificationChannel):
    """An email stand-in answering from a script of results."""

    name: ClassVar[str] = "email"
    results: list[SendResult] = field(default_factory=list)
    sent: list[Delivery] = field(default_factory=list)

    def unreachable(self, recipient: Recipient) -> None:
        return None

    def address(self, recipient: Recipient) -> str:
        return recipient.email

    def send(self, delivery: Delivery) -> SendResult:
        self.sent.append(delivery)
        return self.results.pop(0) if self.results else SendResult.sent()


def test_transient_errors_retry_on_the_ladder_then_fail_with_the_last_error(
    team, due_template, settings
):
    settings.NOTIFY_BACKOFF_S = (10.0, 60.0)
    settings.NOTIFY_MAX_ATTEMPTS = 3
    flaky = FlakyChannel(results=[SendResult.transient(f"SMTP 451: busy {i}") for i in range(3)])
    with channel_override(flaky):
        [notification_id] = queued_ids(schedule(team, due_template, policy="farm_managers"))[:1]
        clock = NOW
        assert notification_deliver(notification_id=notification_id, now=clock) == "retry_scheduled"
        row = Notification.objects.get(pk=notification_id)
        assert row.status == "queued" and row.last_error == "SMTP 451: busy 0"
        assert timedelta(seconds=9) <= row.next_attempt_at - clock <= timedelta(seconds=11)
        assert notification_deliver(notification_id=notification_id, now=clock) == "not_due"
        clock = row.next_attempt_at
        assert notification_deliver(notification_id=notification_id, now=clock) == "retry_scheduled"
        row.refresh_from_db()
        assert timedelta(seconds=54) <= row.next_attempt_at - clock <= timedelta(seconds=66)
        clock = row.next_attempt_at
        assert notification_deliver(notification_id=notification_id, now=clock) == "failed"
    row.refresh_from_db()
    assert (row.status, row.status_reason) == ("failed", "retry_budget_exhausted")
    assert row.status_detail == "3 attempts; last: SMTP 451: busy 2"
    assert len(flaky.sent) == 3
    attempts = list(NotificationAttempt.objects.filter(notification=row).order_by("attempt"))
    assert [(a.attempt, a.outcome) for a in attempts] == [(i, "transient_error") for i in (1, 2, 3)]
    # The same rendered text on every attempt.
    assert len({(d.subject, d.body) for d in flaky.sent}) == 1


def test_the_sweep_queues_due_retries_and_recovers_a_lost_worker(team, due_template, settings):
    settings.NOTIFY_LEASE_S = 60
    settings.NOTIFY_MAX_ATTEMPTS = 2
    ids = queued_ids(schedule(team, due_template, policy="farm_managers"))
    crashed, _fresh = (Notification.objects.get(pk=i) for i in ids)
    # A worker claimed ``crashed`` and died mid-send.
    assert notification_move(
        crashed,
        NotificationStatus.SENDING,
        NotificationReason.CLAIMED,
        now=NOW,
        attempt_count=1,
        lease_expires_at=NOW + timedelta(seconds=60),
    )
    enqueued: list[int] = []
    early = notifications_sweep(now=NOW + timedelta(seconds=5), enqueue=enqueued.append)
    assert (early.requeued, early.enqueued, enqueued) == (0, 0, [])  # the nudge is in flight

    later = NOW + timedelta(seconds=61)
    result = notifications_sweep(now=later, enqueue=enqueued.append)
    assert (result.requeued, result.failed) == (1, 0)
    assert sorted(enqueued) == sorted(ids)  # the recovered row, and the one whose nudge was lost
    crashed.refresh_from_db()
    assert (crashed.status, crashed.status_reason) == ("queued", "lease_expired")
    lost = NotificationAttempt.objects.get(notification=crashed, attempt=1)
    assert lost.outcome == "transient_error" and "lease expired" in lost.error
    for notification_id in enqueued:
        assert notification_deliver(notification_id=notification_id, now=later) == "sent"
    crashed.refresh_from_db()
    assert (crashed.status, crashed.attempt_count) == ("sent", 2)
    assert len(mail.outbox) == 2


def test_a_lost_worker_past_the_budget_fails_the_notification(team, due_template, settings):
    settings.NOTIFY_MAX_ATTEMPTS = 1
    [notification_id] = queued_ids(schedule(team, due_template, policy="farm_managers"))[:1]
    row = Notification.objects.get(pk=notification_id)
    notification_move(
        row,
        NotificationStatus.SENDING,
        NotificationReason.CLAIMED,
        now=NOW,
        attempt_count=1,
        lease_expires_at=NOW,
    )
    result = notifications_sweep(now=NOW + timedelta(seconds=1), enqueue=lambda _: None)
    assert result.failed == 1
    row.refresh_from_db()
    assert (row.status, row.status_reason) == ("failed", "retry_budget_exhausted")


def test_an_opt_out_after_the_hand_off_stops_the_pending_message(team, due_template):
    ids = queued_ids(schedule(team, due_template, policy="farm_managers"))
    owner_row = Notification.objects.get(pk__in=ids, user=team.owner)
    ChannelPreferenceFactory(user=team.owner, channel="email", enabled=False, opted_out_at=NOW)
    assert notification_deliver(notification_id=owner_row.pk, now=NOW) == "skipped"
    owner_row.refresh_from_db()
    assert (owner_row.status, owner_row.status_reason) == ("skipped", "opted_out")
    assert mail.outbox == []


def test_support_retries_a_template_failure_after_the_fix(team, templates):
    write_template(templates, "fixme", subject_txt="Hi", body_txt="Due {{ expires_on }}")
    [notification_id] = queued_ids(schedule(team, "fixme", policy="farm_managers"))[:1]
    notification_deliver(notification_id=notification_id, now=NOW)
    write_template(templates, "fixme", subject_txt="Hi", body_txt="Due {{ due_on|date:'Y-m-d' }}")
    from notifications.services.render import _engine

    _engine.cache_clear()  # production loaders cache templates until restart
    assert notification_retry(
        notification_id=notification_id, actor="support:ann", reason="template fixed", now=NOW
    )
    assert notification_deliver(notification_id=notification_id, now=NOW) == "sent"
    assert mail.outbox[0].body == "Due 2026-03-02\n"
    row = Notification.objects.get(pk=notification_id)
    assert row.max_attempts == 1 + 5  # a fresh budget on top of the spent attempt
    retry = NotificationTransition.objects.get(notification=row, reason="support_retry")
    assert (retry.actor, retry.detail, retry.from_status) == (
        "support:ann",
        "template fixed",
        "failed",
    )


def test_support_cancels_a_queued_notification_and_nothing_is_sent(team, due_template):
    [notification_id] = queued_ids(schedule(team, due_template, policy="farm_managers"))[:1]
    assert notification_cancel(
        notification_id=notification_id, actor="support:bo", reason="customer asked", now=NOW
    )
    assert notification_deliver(notification_id=notification_id, now=NOW) == "not_queued"
    assert mail.outbox == []
    row = Notification.objects.get(pk=notification_id)
    assert (row.status, row.status_reason, row.status_detail) == (
        "cancelled",
        "support_cancelled",
        "customer asked",
    )
    # Cancelled twice, or a sent row retried: refused, nothing changes.
    assert not notification_cancel(notification_id=notification_id, actor="x", reason="again")
    assert notification_retry(notification_id=notification_id, actor="x", reason="undo", now=NOW)
    assert notification_deliver(notification_id=notification_id, now=NOW) == "sent"
    assert not notification_retry(notification_id=notification_id, actor="x", reason="twice")
    assert not notification_cancel(notification_id=notification_id, actor="x", reason="late")


def test_a_channel_bug_is_a_transient_error_not_a_stuck_row(team, due_template):
    class Exploding(FlakyChannel):
        def send(self, delivery: Delivery) -> SendResult:
            raise RuntimeError("boom")

    with channel_override(Exploding()):
        [notification_id] = queued_ids(schedule(team, due_template, policy="farm_managers"))[:1]
        outcome = notification_deliver(notification_id=notification_id, now=NOW)
    assert outcome == DeliveryOutcome.RETRY_SCHEDULED
    row = Notification.objects.get(pk=notification_id)
    assert row.status == "queued" and row.last_error == "RuntimeError: boom"


def test_every_status_change_leaves_a_transition(team, due_template):
    [notification_id] = queued_ids(schedule(team, due_template, policy="farm_managers"))[:1]
    notification_deliver(notification_id=notification_id, now=NOW)
    steps = NotificationTransition.objects.filter(notification_id=notification_id).order_by("pk")
    assert [(t.from_status, t.to_status, t.reason) for t in steps] == [
        ("", "queued", "queued"),
        ("queued", "sending", "claimed"),
        ("sending", "sent", "delivered"),
    ]
    assert json.dumps([t.attempt for t in steps]) == "[0, 1, 1]"
