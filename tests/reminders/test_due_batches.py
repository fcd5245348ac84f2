"""Report and reminder rows run set-based: the scheduler hands a chunk's rows of one type to
the handler's batch entry point, which reads their subscriptions (or settings) in one
statement and revalidates each row before it writes. Every row ends as the row-by-row path
ends it, and rows whose subscription is inactive cost the statements of one such row,
however many there are."""

from __future__ import annotations

from datetime import UTC, date, datetime

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from reminders.models import Document, ReportSubscription
from reminders.scheduler_handlers import ReminderSchedulerHandler, ReportSchedulerHandler
from scheduler.models import DueWork
from scheduler.services import scheduler_claim_due, scheduler_execute_chunk
from tests.reminders.conftest import date_setting, document, notifications_for, run_due
from tests.reminders.test_reports import report_rows, subscribe

pytestmark = pytest.mark.django_db

DUE = datetime(2026, 3, 3, 6, 0, tzinfo=UTC)  # 07:00 in Berlin, the day after the first period


def test_the_report_and_reminder_handlers_take_batches() -> None:
    assert callable(getattr(ReportSchedulerHandler(), "run_batch", None))
    assert callable(getattr(ReminderSchedulerHandler(), "run_batch", None))


def test_a_batch_ends_each_row_as_it_would_end_alone(farm) -> None:
    sent, paused, gone = subscribe(farm), subscribe(farm), subscribe(farm)
    ReportSubscription.objects.filter(pk=paused.pk).update(active=False)
    ReportSubscription.objects.filter(pk=gone.pk).delete()  # its row stays, naming it
    assert run_due(DUE) == {"completed": 1, "deactivated": 2}
    (row,) = report_rows(sent)
    assert row.status == "completed" and len(notifications_for(row.scheduler_key)) == 1
    (row,) = report_rows(paused)
    assert (row.status, row.failure_reason_code) == ("deactivated", "reminder_setting_inactive")
    ended = DueWork.objects.filter(scheduler_key__contains=str(gone.guid)).get()
    assert (ended.status, ended.failure_reason_code) == ("deactivated", "source_no_longer_valid")
    assert notifications_for(ended.scheduler_key) == []


def _statements_to_end(farm, rows: int) -> int:
    """The statements of executing ``rows`` claimed rows (the claim is counted by the
    scheduler's own tests)."""
    subs = [subscribe(farm) for _ in range(rows)]
    ReportSubscription.objects.filter(pk__in=[s.pk for s in subs]).update(active=False)
    claimed = [(c.scheduler_id, c.token) for c in scheduler_claim_due(now=DUE, limit=rows)]
    with CaptureQueriesContext(connection) as seen:
        assert scheduler_execute_chunk(rows=claimed, clock=lambda: DUE) == {"deactivated": rows}
    DueWork.objects.all().delete()
    return len(seen)


def test_twenty_rows_of_inactive_subscriptions_cost_what_one_does(farm) -> None:
    assert _statements_to_end(farm, 20) == _statements_to_end(farm, 1)


REMINDER_DUE = datetime(2026, 6, 23, 7, 0, tzinfo=UTC)  # the 7-day reminder of a 30 June expiry


def test_a_batch_of_reminders_ends_each_as_it_would_end_alone(farm, bus) -> None:
    """Three documents under one setting, one of them gone: two reminders sent, one row
    deactivated, in one batch."""
    with bus.commit():
        date_setting(farm, offsets_days=[7])
        kept = [document(farm, date(2026, 6, 30)) for _ in range(2)]
        gone = document(farm, date(2026, 6, 30))
    Document.objects.filter(pk=gone.pk).update(active=False)
    assert run_due(REMINDER_DUE) == {"completed": 2, "deactivated": 1}
    rows = {r.scheduler_key: r for r in DueWork.objects.all()}
    sent = [k for k, r in rows.items() if r.status == "completed"]
    assert len(sent) == 2 and all(len(notifications_for(k)) == 1 for k in sent)
    assert all(str(d.guid) in " ".join(sent) for d in kept)
    (ended,) = [r for r in rows.values() if r.status == "deactivated"]
    assert str(gone.guid) in ended.scheduler_key
    assert ended.failure_reason_code == "source_no_longer_valid"
