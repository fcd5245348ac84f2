"""Report rows run set-based: the scheduler hands a chunk's report rows to the handler's batch
entry point, which reads their subscriptions in one statement and revalidates each row before
it writes. Every row ends as the row-by-row path ends it, and rows whose subscription is gone
or inactive cost the statements of one such row, however many there are."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from reminders.models import ReportSubscription
from reminders.scheduler_handlers import ReportSchedulerHandler
from scheduler.models import DueWork
from scheduler.services import scheduler_claim_due, scheduler_execute_chunk
from tests.reminders.conftest import notifications_for, run_due
from tests.reminders.test_reports import report_rows, subscribe

pytestmark = pytest.mark.django_db

DUE = datetime(2026, 3, 3, 6, 0, tzinfo=UTC)  # 07:00 in Berlin, the day after the first period


def test_the_report_handler_takes_batches() -> None:
    assert callable(getattr(ReportSchedulerHandler(), "run_batch", None))


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
