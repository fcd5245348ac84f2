"""Execution-time revalidation: at due time the handler reloads setting, source, recipients
and template and rebuilds the occurrence. Drift the event path never saw (the writes below
bypass the services, so no event is published) ends as an outcome with its reason code; the
hand-off is keyed by the SchedulerKey, so running twice queues nothing twice."""

from __future__ import annotations

from datetime import UTC, date, datetime

import pytest
from django.core.files.storage import default_storage

from notifications.models import Notification
from notifications.services import notification_render
from notifications.services.context import context_decode
from reminders.models import Document, ReminderSetting
from reminders.scheduler_handlers import ReminderSchedulerHandler
from scheduler.models import DueWork
from scheduler.selectors import scheduler_claimed_job
from scheduler.services import scheduler_claim_due
from tests.notifications.factories import ExternalContactFactory
from tests.reminders.conftest import date_setting, document, notifications_for, run_due

pytestmark = pytest.mark.django_db

DUE = datetime(2026, 6, 23, 7, 0, tzinfo=UTC)  # the 7-day reminder of a 2026-06-30 expiry


@pytest.fixture
def due_row(farm, bus) -> DueWork:
    with bus.commit():
        date_setting(farm, offsets_days=[7])
        document(farm, date(2026, 6, 30))
    return DueWork.objects.get()


def _outcome(row: DueWork) -> tuple[str, str, bool]:
    row.refresh_from_db()
    return row.status, row.failure_reason_code, row.is_on_support_hold


def test_a_setting_deactivated_behind_the_event_path_deactivates_at_due_time(due_row) -> None:
    ReminderSetting.objects.update(active=False)
    assert run_due(DUE) == {"deactivated": 1}
    assert _outcome(due_row) == ("deactivated", "reminder_setting_inactive", False)
    assert Notification.objects.count() == 0


def test_a_source_gone_deactivates_at_due_time(due_row) -> None:
    Document.objects.update(active=False)
    assert run_due(DUE) == {"deactivated": 1}
    assert _outcome(due_row) == ("deactivated", "source_no_longer_valid", False)


def test_a_moved_expiry_deactivates_the_old_occurrence_at_due_time(due_row) -> None:
    Document.objects.update(expires_on=date(2026, 7, 30))
    assert run_due(DUE) == {"deactivated": 1}
    assert _outcome(due_row) == ("deactivated", "source_no_longer_valid", False)


def test_a_removed_offset_deactivates_with_setting_changed(due_row) -> None:
    ReminderSetting.objects.update(offsets_days=[14])
    assert run_due(DUE) == {"deactivated": 1}
    assert _outcome(due_row) == ("deactivated", "setting_changed", False)


def test_a_different_input_under_the_same_key_is_held_for_support(due_row) -> None:
    DueWork.objects.update(input_hash="0" * 64)
    assert run_due(DUE) == {"held": 1}
    assert _outcome(due_row) == ("pending", "input_hash_conflict", True)


def test_a_missing_template_fails_without_retrying(due_row) -> None:
    ReminderSetting.objects.update(template_name="no_such_template")
    assert run_due(DUE) == {"failed": 1}
    assert _outcome(due_row) == ("failed", "handler_error", False)


def test_recipients_and_channels_are_read_when_the_row_runs(farm, due_row) -> None:
    ExternalContactFactory(farm=farm, name="Insurer", email="broker@example.org")
    ReminderSetting.objects.update(channels=["email", "inbox"])
    assert run_due(DUE) == {"completed": 1}
    sent = notifications_for(due_row.scheduler_key)
    assert sorted((n.recipient_key.split(":")[0], n.channel) for n in sent) == [
        ("contact", "email"),
        ("contact", "email"),
        ("contact", "inbox"),
        ("contact", "inbox"),
    ]


def test_running_the_handler_twice_queues_each_notification_once(due_row) -> None:
    (claim,) = scheduler_claim_due(now=DUE)
    job = scheduler_claimed_job(scheduler_id=claim.scheduler_id, token=claim.token, now=DUE)
    assert job is not None
    handler = ReminderSchedulerHandler()
    first = handler.run(job)
    second = handler.run(job)
    assert first.coordinates == second.coordinates
    assert first.coordinates["queued"] == 1
    assert len(notifications_for(due_row.scheduler_key)) == 1


def test_coordinates_stay_small_and_the_full_list_goes_to_the_trace(farm, due_row) -> None:
    for n in range(60):
        ExternalContactFactory(farm=farm, name=f"c{n}", email=f"c{n}@example.org")
    assert run_due(DUE) == {"completed": 1}
    due_row.refresh_from_db()
    result = due_row.dispatch_result_json
    assert result["queued"] == 61 and 0 < len(result["notifications"]) < 61
    with default_storage.open(due_row.trace_blob_name) as blob:
        assert blob.read().count(b"notification_id") == 61


def test_the_document_template_renders_with_the_context_handed_over(due_row) -> None:
    assert run_due(DUE) == {"completed": 1}
    (note,) = notifications_for(due_row.scheduler_key)
    rendered = notification_render(
        template_name=note.template_name,
        context=context_decode(note.context),
        locale="en",
        time_zone="Europe/Berlin",
    )
    assert rendered.subject == 'Insurance "Farm liability" expires on 2026-06-30'
    assert "7 days from the day of this reminder" in rendered.body
