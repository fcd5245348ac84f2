"""scheduler_ensure: one test per line of the docs/spec.md §4 ensure table, plus the lines the table
leaves implicit (a claimed row, a conflict on a completed row, concurrent ensures)."""

from __future__ import annotations

import threading
import uuid
from datetime import date, timedelta

import pytest
from django.db import connection

from scheduler.keys import report_manual_key, report_scheduled_key
from scheduler.models import DueWork, DueWorkTransition
from scheduler.services import (
    EnsureOutcome,
    scheduler_cancel,
    scheduler_claim_due,
    scheduler_complete,
    scheduler_deactivate_by_key,
    scheduler_ensure,
    scheduler_execute,
    scheduler_fail,
    scheduler_release_stale,
)
from scheduler.states import SchedulerReason, SchedulerStatus
from tests.scheduler.conftest import NOW, SUBSCRIPTION, ensure_report

pytestmark = pytest.mark.django_db

RUN = uuid.UUID("11111111-2222-4333-8444-555555555555")


def _row(pk: int) -> DueWork:
    return DueWork.objects.get(pk=pk)


def _with_one_attempt() -> DueWork:
    """A row whose first claim expired: RetryCount 1, Pending until NOW + ~5 min + 5 min."""
    ensure_report(run=RUN)
    (claim,) = scheduler_claim_due(now=NOW)
    scheduler_release_stale(now=claim.lease_expires_on + timedelta(seconds=1))
    row = DueWork.objects.get(pk=claim.scheduler_id)
    assert row.retry_count == 1
    return row


def test_no_row_inserts_a_pending_row() -> None:
    result = ensure_report(run=RUN)
    assert result.outcome == EnsureOutcome.INSERTED
    row = _row(result.scheduler_id)
    assert (row.status, row.version, row.retry_count) == ("pending", 0, 0)
    assert row.automation_type == "report_subscription" and row.trigger_type == "manual_run"
    assert row.scheduler_key == f"report-subscription:{SUBSCRIPTION}:manual:{RUN}"
    assert DueWorkTransition.objects.filter(scheduler=row, to_status="pending").exists()


def test_pending_row_with_the_same_input_and_schedule_is_unchanged() -> None:
    first = ensure_report(run=RUN)
    again = ensure_report(run=RUN)
    assert again.outcome == EnsureOutcome.UNCHANGED
    assert again.scheduler_id == first.scheduler_id and again.version == first.version
    assert DueWork.objects.count() == 1


def test_pending_row_with_a_new_send_time_is_updated_in_place() -> None:
    row = _with_one_attempt()
    later = NOW + timedelta(hours=3)
    result = ensure_report(run=RUN, scheduled_on=later)
    assert result.outcome == EnsureOutcome.UPDATED
    updated = _row(row.pk)
    assert updated.scheduled_on == later
    assert updated.retry_count == 1  # attempts kept
    assert updated.version == row.version + 1


@pytest.mark.parametrize("status", ["failed", "deactivated", "cancelled"])
def test_failed_deactivated_or_cancelled_row_is_reactivated_keeping_attempts(status) -> None:
    row = _with_one_attempt()
    retry_at = row.next_retry_on
    assert retry_at is not None
    if status == "failed":
        (claim,) = scheduler_claim_due(now=retry_at)
        scheduler_fail(
            scheduler_id=claim.scheduler_id,
            token=claim.token,
            reason=SchedulerReason.HANDLER_ERROR,
            now=retry_at,
            retryable=False,
            trace_blob_name="automation-scheduler/x/trace.json",
        )
    elif status == "deactivated":
        assert scheduler_deactivate_by_key(
            scheduler_key=row.scheduler_key, reason=SchedulerReason.SETTING_CHANGED, now=NOW
        )
    else:
        assert scheduler_cancel(
            scheduler_id=row.pk, token=row.version, from_status="pending", now=NOW
        )
    before = _row(row.pk)
    assert before.status == status
    result = ensure_report(run=RUN, scheduled_on=NOW + timedelta(days=1))
    assert result.outcome == EnsureOutcome.REACTIVATED
    after = _row(row.pk)
    assert after.status == "pending"
    assert after.scheduled_on == NOW + timedelta(days=1)
    assert after.retry_count == before.retry_count == 1
    assert after.failure_reason_code == before.failure_reason_code != ""
    assert after.trace_blob_name == before.trace_blob_name


def test_completed_row_returns_its_coordinates_and_is_never_sent_again(handler) -> None:
    ensure_report(run=RUN)
    (claim,) = scheduler_claim_due(now=NOW)
    assert scheduler_execute(scheduler_id=claim.scheduler_id, token=claim.token, now=NOW)
    result = ensure_report(run=RUN, scheduled_on=NOW + timedelta(hours=1))
    assert result.outcome == EnsureOutcome.ALREADY_COMPLETED
    assert result.status == "completed"
    assert result.dispatch_result == {"notificationId": 42}
    assert scheduler_claim_due(now=NOW + timedelta(days=1)) == []
    assert len(handler.runs) == 1


def test_same_key_different_input_is_held_for_support_never_overwritten() -> None:
    first = ensure_report(run=RUN, payload={"recipients": 3})
    original_hash = _row(first.scheduler_id).input_hash
    result = ensure_report(run=RUN, payload={"recipients": 4}, scheduled_on=NOW)
    assert result.outcome == EnsureOutcome.CONFLICT
    row = _row(first.scheduler_id)
    assert row.is_on_support_hold
    assert row.failure_reason_code == SchedulerReason.INPUT_HASH_CONFLICT
    assert row.input_hash == original_hash
    assert row.scheduled_on == NOW - timedelta(minutes=1)  # not overwritten either
    assert scheduler_claim_due(now=NOW + timedelta(days=1)) == []
    again = ensure_report(run=RUN, payload={"recipients": 4})
    assert again.outcome == EnsureOutcome.CONFLICT and again.version == row.version


def test_compatible_ensure_never_clears_a_support_hold() -> None:
    ensure_report(run=RUN, payload="a")
    ensure_report(run=RUN, payload="b")
    result = ensure_report(run=RUN, payload="a", scheduled_on=NOW + timedelta(hours=2))
    assert result.outcome == EnsureOutcome.UPDATED
    assert result.is_on_support_hold
    assert scheduler_claim_due(now=NOW + timedelta(days=1)) == []


def test_completed_row_with_a_different_input_is_a_conflict_left_untouched(handler) -> None:
    ensure_report(run=RUN, payload="a")
    (claim,) = scheduler_claim_due(now=NOW)
    scheduler_execute(scheduler_id=claim.scheduler_id, token=claim.token, now=NOW)
    version = _row(claim.scheduler_id).version
    result = ensure_report(run=RUN, payload="b")
    assert result.outcome == EnsureOutcome.CONFLICT
    row = _row(claim.scheduler_id)
    assert (row.status, row.version, row.is_on_support_hold) == ("completed", version, False)


def test_claimed_row_with_the_same_input_is_left_to_its_worker() -> None:
    ensure_report(run=RUN)
    (claim,) = scheduler_claim_due(now=NOW)
    result = ensure_report(run=RUN, scheduled_on=NOW + timedelta(hours=1))
    assert result.outcome == EnsureOutcome.IN_PROGRESS
    assert scheduler_complete(
        scheduler_id=claim.scheduler_id, token=claim.token, coordinates={}, now=NOW
    )


def test_claimed_row_with_a_different_input_loses_its_claim_to_the_hold() -> None:
    ensure_report(run=RUN, payload="a")
    (claim,) = scheduler_claim_due(now=NOW)
    assert ensure_report(run=RUN, payload="b").outcome == EnsureOutcome.CONFLICT
    assert not scheduler_complete(
        scheduler_id=claim.scheduler_id, token=claim.token, coordinates={}, now=NOW
    )
    row = _row(claim.scheduler_id)
    assert (row.status, row.is_on_support_hold) == ("pending", True)


def test_ensure_validates_its_inputs() -> None:
    key = report_manual_key(subscription_guid=SUBSCRIPTION, manual_run_guid=RUN)
    digest = "0" * 64
    with pytest.raises(ValueError, match="timezone-aware"):
        scheduler_ensure(key=key, scheduled_on=NOW.replace(tzinfo=None), input_hash=digest)
    with pytest.raises(ValueError, match="trigger type"):
        scheduler_ensure(key=key, scheduled_on=NOW, input_hash=digest, trigger_type="date_based")
    with pytest.raises(ValueError, match="time zone"):
        scheduler_ensure(key=key, scheduled_on=NOW, input_hash=digest, time_zone_id="Mars/Base")
    with pytest.raises(ValueError, match="sha256"):
        scheduler_ensure(key=key, scheduled_on=NOW, input_hash="abc")


def test_local_schedule_and_recurring_trigger_are_stored() -> None:
    key = report_scheduled_key(subscription_guid=SUBSCRIPTION, period_start_utc=NOW)
    result = scheduler_ensure(
        key=key,
        scheduled_on=NOW,
        scheduled_local_date=date(2026, 3, 1),
        time_zone_id="Asia/Ho_Chi_Minh",
        trigger_type="recurring",
        input_hash="a" * 64,
        now=NOW,
    )
    row = _row(result.scheduler_id)
    assert (row.trigger_type, row.time_zone_id) == ("recurring", "Asia/Ho_Chi_Minh")
    assert row.scheduled_local_date == date(2026, 3, 1)


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_concurrent_ensures_of_one_key_insert_one_row() -> None:
    barrier = threading.Barrier(6)
    outcomes: list[str] = []

    def work() -> None:
        try:
            barrier.wait()
            outcomes.append(ensure_report(run=RUN).outcome)
        finally:
            connection.close()

    threads = [threading.Thread(target=work) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(outcomes) == ["inserted"] + ["unchanged"] * 5
    assert DueWork.objects.count() == 1
    assert DueWork.objects.get().status == SchedulerStatus.PENDING
