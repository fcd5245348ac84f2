"""Users' scheduled messages on the due-work table: one row per occurrence keyed
``user-message:{guid}:{scheduledOnUtc}``; a text edit leaves the rows alone and is what is
sent; a time edit moves the pending rows in place (same ids, new keys) and never re-sends a
completed occurrence; cancel deactivates pending rows and keeps completed ones; beat extends
the rows to the horizon; a redelivered task queues one notification per recipient and
channel."""

from __future__ import annotations

from datetime import UTC, date, datetime, time, timedelta

import pytest
from django.contrib.auth import get_user_model
from django.core import mail

from notifications.models import Notification
from notifications.services import notification_deliver
from reminders.models import UserMessageOccurrence
from reminders.scheduler_handlers import UserMessageSchedulerHandler
from reminders.services.user_messages import (
    UserMessageCancelled,
    UserMessageInvalid,
    user_message_cancel,
    user_message_update,
    user_messages_ensure_due,
)
from scheduler.models import DueWork, DueWorkTransition
from scheduler.selectors import scheduler_claimed_job
from scheduler.services import scheduler_claim_due, scheduler_execute
from tests.notifications.factories import ExternalContactFactory, MembershipFactory
from tests.reminders.conftest import NOW, notifications_for, run_due
from tests.reminders.user_messages_kit import message, rows

pytestmark = pytest.mark.django_db
# Berlin is UTC+1 in March: 09:00 local is 08:00Z.
FIRST = datetime(2026, 3, 3, 8, 0, tzinfo=UTC)


def test_a_one_off_message_is_one_row_keyed_by_its_instant_and_sent_once(farm) -> None:
    msg = message(farm)
    (row,) = rows(msg)
    assert (row.key_time, row.status, row.scheduled_on) == (
        "2026-03-03T08:00:00Z",
        "pending",
        FIRST,
    )
    assert DueWork.objects.get(pk=row.pk).scheduler_key == (
        f"user-message:{msg.guid}:2026-03-03T08:00:00Z"
    )
    assert run_due(FIRST - timedelta(minutes=1)) == {}
    assert run_due(FIRST) == {"completed": 1}
    (note,) = notifications_for(f"user-message:{msg.guid}:2026-03-03T08:00:00Z")
    assert (note.recipient_key.split(":")[0], note.channel, note.template_name) == (
        "contact",
        "email",
        "user_message",
    )
    assert note.context["text"] == "Close the north gate tonight."
    assert run_due(FIRST + timedelta(days=1)) == {}


def test_editing_the_text_keeps_the_rows_and_the_new_text_is_sent(farm) -> None:
    msg = message(farm, recurrence="daily", count=3)
    before = rows(msg)
    versions = dict(DueWork.objects.values_list("pk", "version"))
    changed, synced = user_message_update(
        message_id=msg.pk, text="Gate is fixed; leave it open.", subject="Gate (update)", now=NOW
    )
    assert sorted(changed) == ["subject", "text"] and not synced.moved
    assert rows(msg) == before
    assert dict(DueWork.objects.values_list("pk", "version")) == versions
    assert run_due(FIRST) == {"completed": 1}
    (note,) = notifications_for(f"user-message:{msg.guid}:2026-03-03T08:00:00Z")
    assert note.context["text"] == "Gate is fixed; leave it open."
    assert note.context["subject"] == "Gate (update)"


def test_editing_the_time_moves_pending_rows_in_place_and_keeps_completed_ones(farm) -> None:
    msg = message(farm, recurrence="daily", count=4)
    before = rows(msg)
    assert [r.key_time for r in before] == [
        "2026-03-03T08:00:00Z",
        "2026-03-04T08:00:00Z",
        "2026-03-05T08:00:00Z",
        "2026-03-06T08:00:00Z",
    ]
    assert run_due(FIRST) == {"completed": 1}
    edited_at = FIRST + timedelta(hours=1)
    changed, synced = user_message_update(message_id=msg.pk, send_time=time(11, 30), now=edited_at)
    assert changed == ["send_time"] and len(synced.moved) == 3 and not synced.ensured
    after = rows(msg)
    assert [r.pk for r in after] == [r.pk for r in before]  # the same rows, re-keyed
    assert [(r.key_time, r.status) for r in after] == [
        ("2026-03-03T08:00:00Z", "completed"),  # history: untouched
        ("2026-03-04T10:30:00Z", "pending"),
        ("2026-03-05T10:30:00Z", "pending"),
        ("2026-03-06T10:30:00Z", "pending"),
    ]
    assert DueWork.objects.filter(scheduler_key__contains=str(msg.guid)).count() == 4
    moved = DueWorkTransition.objects.filter(
        scheduler_id=after[1].pk, detail__startswith="user message re-timed"
    )
    assert moved.count() == 1
    # Today's occurrence was sent at 09:00; its new time (11:30 today) does not send it again.
    assert run_due(datetime(2026, 3, 3, 12, 0, tzinfo=UTC)) == {}
    assert run_due(datetime(2026, 3, 4, 10, 30, tzinfo=UTC)) == {"completed": 1}
    assert Notification.objects.count() == 2


def test_a_once_message_moved_to_another_day_is_the_same_row(farm) -> None:
    msg = message(farm)
    (before,) = rows(msg)
    user_message_update(
        message_id=msg.pk, starts_on=date(2026, 3, 5), send_time=time(7, 0), now=NOW
    )
    (after,) = rows(msg)
    assert (after.pk, after.key_time, after.status) == (
        before.pk,
        "2026-03-05T06:00:00Z",
        "pending",
    )
    assert run_due(FIRST) == {}
    assert run_due(datetime(2026, 3, 5, 6, 0, tzinfo=UTC)) == {"completed": 1}


def test_a_smaller_count_deactivates_the_rows_no_longer_wanted(farm) -> None:
    msg = message(farm, recurrence="daily", count=4)
    user_message_update(message_id=msg.pk, count=2, now=NOW)
    assert [(r.sequence, r.status, r.reason) for r in rows(msg)] == [
        (0, "pending", ""),
        (1, "pending", ""),
        (2, "deactivated", "setting_changed"),
        (3, "deactivated", "setting_changed"),
    ]
    user_message_update(message_id=msg.pk, count=3, now=NOW)  # back: the same row again
    assert [r.status for r in rows(msg)] == ["pending", "pending", "pending", "deactivated"]


def test_cancel_deactivates_pending_rows_and_keeps_completed_ones(farm) -> None:
    msg = message(farm, recurrence="daily", until=date(2026, 3, 5))
    assert run_due(FIRST) == {"completed": 1}
    assert user_message_cancel(message_id=msg.pk, actor="ops", reason="wrong farm", now=FIRST)
    assert [(r.status, r.reason) for r in rows(msg)] == [
        ("completed", ""),
        ("deactivated", "reminder_setting_inactive"),
        ("deactivated", "reminder_setting_inactive"),
    ]
    audit = DueWorkTransition.objects.filter(to_status="deactivated")
    assert set(audit.values_list("detail", flat=True)) == {
        "user message cancelled by ops: wrong farm"
    }
    assert not user_message_cancel(message_id=msg.pk, now=FIRST)  # twice: no-op
    assert run_due(datetime(2026, 3, 10, 8, 0, tzinfo=UTC)) == {}
    assert user_messages_ensure_due(now=datetime(2026, 3, 9, tzinfo=UTC)) == 0
    with pytest.raises(UserMessageCancelled):
        user_message_update(message_id=msg.pk, text="again", now=FIRST)


def test_a_claimed_row_of_a_cancelled_message_is_not_sent(farm) -> None:
    msg = message(farm)
    (claim,) = scheduler_claim_due(now=FIRST)
    user_message_cancel(message_id=msg.pk, now=FIRST)
    assert (
        scheduler_execute(scheduler_id=claim.scheduler_id, token=claim.token, now=FIRST) == "lost"
    )
    assert Notification.objects.count() == 0


def test_a_row_claimed_before_a_time_edit_is_not_sent_at_the_old_time(farm) -> None:
    msg = message(farm)
    (claim,) = scheduler_claim_due(now=FIRST)
    user_message_update(message_id=msg.pk, send_time=time(10, 0), now=FIRST)
    (row,) = rows(msg)
    assert row.status == "processing"  # in flight: left to its handler
    outcome = scheduler_execute(scheduler_id=claim.scheduler_id, token=claim.token, now=FIRST)
    assert outcome == "deactivated" and Notification.objects.count() == 0
    user_messages_ensure_due(now=FIRST)
    (row,) = rows(msg)
    assert (row.key_time, row.status) == ("2026-03-03T09:00:00Z", "pending")
    assert run_due(datetime(2026, 3, 3, 9, 0, tzinfo=UTC)) == {"completed": 1}


def test_rows_reach_the_horizon_and_beat_extends_them(farm) -> None:
    msg = message(farm, recurrence="daily", count=30)
    assert len(rows(msg)) == 7  # 2026-03-03 .. 03-09: a week ahead of NOW
    later = NOW + timedelta(days=3)
    assert user_messages_ensure_due(now=later) == 3
    assert user_messages_ensure_due(now=later) == 0
    assert [r.sequence for r in rows(msg)] == list(range(10))


def test_an_occurrence_before_the_time_edit_is_not_wanted(farm) -> None:
    """Moved to a time earlier today, after it passed: deactivated, not sent late."""
    msg = message(
        farm, recurrence="daily", count=2, starts_on=date(2026, 3, 2), send_time=time(15, 0)
    )
    user_message_update(message_id=msg.pk, send_time=time(8, 0), now=NOW)  # 10:00 local now
    assert [(r.key_time, r.status) for r in rows(msg)] == [
        ("2026-03-02T14:00:00Z", "deactivated"),
        ("2026-03-03T07:00:00Z", "pending"),
    ]


def test_chosen_recipients_are_the_farm_people_named_at_due_time(farm) -> None:
    users = get_user_model().objects
    member = users.create_user("ann", email="ann@example.org")
    leaver = users.create_user("bob", email="bob@example.org")
    MembershipFactory(user=member, farm=farm)
    membership = MembershipFactory(user=leaver, farm=farm)
    contact = ExternalContactFactory(farm=farm, name="Buyer", email="buyer@example.org")
    msg = message(
        farm,
        recipients_policy="chosen",
        recipient_users=[member.pk, leaver.pk],
        recipient_contacts=[contact.pk],
        channels=["email", "inbox"],
    )
    membership.delete()  # left the farm before the message was due
    assert run_due(FIRST) == {"completed": 1}
    sent = notifications_for(f"user-message:{msg.guid}:2026-03-03T08:00:00Z")
    assert sorted((n.recipient_key, n.channel) for n in sent) == sorted(
        [
            (f"user:{member.pk}", "email"),
            (f"user:{member.pk}", "inbox"),
            (f"contact:{contact.pk}", "email"),
            (f"contact:{contact.pk}", "inbox"),
        ]
    )


def test_a_redelivered_task_queues_one_notification_per_recipient_and_channel(farm) -> None:
    ExternalContactFactory(farm=farm, name="Insurer", email="ins@example.org")
    msg = message(farm, channels=["email", "inbox"])
    (claim,) = scheduler_claim_due(now=FIRST)
    job = scheduler_claimed_job(scheduler_id=claim.scheduler_id, token=claim.token, now=FIRST)
    assert job is not None
    handler = UserMessageSchedulerHandler()
    first = handler.run(job)
    second = handler.run(job)  # the same task delivered again, before the row completed
    assert first.coordinates == second.coordinates and first.coordinates["queued"] == 4
    assert scheduler_execute(scheduler_id=claim.scheduler_id, token=claim.token, now=FIRST) == (
        "completed"
    )
    # Redelivered once more after completion: the claim is gone, nothing runs.
    assert (
        scheduler_execute(scheduler_id=claim.scheduler_id, token=claim.token, now=FIRST) == "lost"
    )
    key = f"user-message:{msg.guid}:2026-03-03T08:00:00Z"
    assert len(notifications_for(key)) == 4
    assert UserMessageOccurrence.objects.filter(message=msg).count() == 1
    # The notify task delivered twice as well: each email goes out once.
    for note in notifications_for(key):
        notification_deliver(notification_id=note.pk, now=FIRST)
        notification_deliver(notification_id=note.pk, now=FIRST)
    assert sorted(m.to[0] for m in mail.outbox) == ["ins@example.org", "vet@example.org"]
    assert "Close the north gate tonight." in mail.outbox[0].body


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"count": 3}, "until"),  # a one-off message has no bounds
        ({"recurrence": "daily"}, "until"),  # a recurring one needs one
        ({"recurrence": "daily", "until": date(2026, 3, 1)}, "until"),
        ({"recurrence": "daily", "until": date(2030, 1, 1)}, "until"),  # > 1000 sends
        ({"recurrence": "daily", "count": 0}, "count"),
        ({"starts_on": date(2026, 3, 1)}, "starts_on"),  # in the past
        ({"channels": ["fax"]}, "channels"),
        ({"channels": []}, "channels"),
        ({"text": "  "}, "text"),
        ({"recipients_policy": "chosen"}, "recipient_users"),
        ({"recipients_policy": "chosen", "recipient_users": [999999]}, "recipient_users"),
        ({"recipients_policy": "chosen", "recipient_contacts": [999999]}, "recipient_contacts"),
        ({"recipient_users": [1]}, "recipients_policy"),
    ],
)
def test_refused_messages_name_the_field_and_save_nothing(farm, overrides, field) -> None:
    with pytest.raises(UserMessageInvalid) as refused:
        message(farm, **overrides)
    assert refused.value.field == field
    assert not DueWork.objects.exists()
    assert not UserMessageOccurrence.objects.exists()
