"""The backoff ladder (docs/spec.md §4): an expired lease or a failed attempt returns the row to
Pending with RetryCount + 1 after 5 min, then 15 min, then 1 h; the next one puts it on
support hold. Time is injected: nothing sleeps."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest

from scheduler.models import DueWork, DueWorkTransition
from scheduler.services import (
    scheduler_backoff,
    scheduler_claim_due,
    scheduler_execute,
    scheduler_hold_release,
    scheduler_release_stale,
)
from scheduler.states import SchedulerReason
from tests.scheduler.conftest import NOW, ensure_report

pytestmark = pytest.mark.django_db

LADDER = [(1, timedelta(minutes=5)), (2, timedelta(minutes=15)), (3, timedelta(hours=1))]


def _expire(now: datetime) -> tuple[int, datetime]:
    """Claim the one due row at ``now`` and let its lease run out; returns (id, cleanup time)."""
    (claim,) = scheduler_claim_due(now=now)
    return claim.scheduler_id, claim.lease_expires_on + timedelta(seconds=1)


def test_the_ladder_is_5_min_15_min_1_h_then_hold() -> None:
    assert [scheduler_backoff(n) for n in (1, 2, 3)] == [w for _, w in LADDER]
    assert scheduler_backoff(4) is None


@pytest.mark.parametrize(("attempt", "wait"), LADDER)
def test_expired_lease_returns_the_row_to_pending_after_the_ladder_step(attempt, wait) -> None:
    ensure_report()
    now = NOW
    for _ in range(attempt):
        pk, cleanup_at = _expire(now)
        result = scheduler_release_stale(now=cleanup_at)
        assert (result.released, result.held) == (1, 0)
        row = DueWork.objects.get(pk=pk)
        now = row.next_retry_on
    assert row.status == "pending"
    assert row.retry_count == attempt
    assert row.next_retry_on == cleanup_at + wait
    assert row.failure_reason_code == SchedulerReason.LEASE_EXPIRED
    assert row.processing_lease_expires_on is None
    assert not row.is_on_support_hold
    assert scheduler_claim_due(now=row.next_retry_on - timedelta(seconds=1)) == []
    assert len(scheduler_claim_due(now=row.next_retry_on)) == 1


def test_fourth_expired_lease_after_the_1_h_retry_puts_the_row_on_support_hold() -> None:
    ensure_report()
    now = NOW
    for _ in range(3):
        pk, cleanup_at = _expire(now)
        scheduler_release_stale(now=cleanup_at)
        now = DueWork.objects.get(pk=pk).next_retry_on
    pk, cleanup_at = _expire(now)  # the retry after 1 h expires too
    result = scheduler_release_stale(now=cleanup_at)
    assert (result.released, result.held) == (0, 1)
    row = DueWork.objects.get(pk=pk)
    assert (row.status, row.retry_count, row.is_on_support_hold) == ("pending", 4, True)
    assert row.next_retry_on is None
    assert scheduler_claim_due(now=cleanup_at + timedelta(days=30)) == []
    steps = DueWorkTransition.objects.filter(
        scheduler_id=pk, reason_code=SchedulerReason.LEASE_EXPIRED
    ).order_by("id")
    assert [t.retry_count for t in steps] == [1, 2, 3, 4]
    assert "support hold" in steps.last().detail


def test_stale_cleanup_leaves_live_leases_alone() -> None:
    ensure_report()
    (claim,) = scheduler_claim_due(now=NOW)
    result = scheduler_release_stale(now=claim.lease_expires_on - timedelta(seconds=1))
    assert (result.released, result.held) == (0, 0)
    assert DueWork.objects.get(pk=claim.scheduler_id).status == "processing"


@pytest.mark.parametrize(("attempt", "wait"), [*LADDER, (4, None)])
def test_failures_follow_the_same_ladder(handler, attempt, wait) -> None:
    handler.run_raises = TimeoutError("notification store unavailable")
    pk = ensure_report().scheduler_id
    now = NOW
    for n in range(1, attempt + 1):
        (claim,) = scheduler_claim_due(now=now)
        outcome = scheduler_execute(scheduler_id=claim.scheduler_id, token=claim.token, now=now)
        row = DueWork.objects.get(pk=pk)
        assert outcome == ("held" if n == 4 else "retry_scheduled")
        if n < attempt:
            now = row.next_retry_on
    assert row.status == "pending" and row.retry_count == attempt
    assert row.failure_reason_code == SchedulerReason.HANDLER_ERROR
    if wait is None:
        assert row.is_on_support_hold and row.next_retry_on is None
    else:
        assert not row.is_on_support_hold and row.next_retry_on == now + wait
    assert row.trace_blob_name  # the traceback went to file storage, not to the row


def test_support_release_makes_a_held_row_due_now_keeping_attempts(handler) -> None:
    handler.run_raises = TimeoutError("down")
    pk = ensure_report().scheduler_id
    now = NOW
    for _ in range(4):
        (claim,) = scheduler_claim_due(now=now)
        scheduler_execute(scheduler_id=claim.scheduler_id, token=claim.token, now=now)
        now = DueWork.objects.get(pk=pk).next_retry_on or now
    assert DueWork.objects.get(pk=pk).is_on_support_hold
    assert scheduler_hold_release(scheduler_id=pk, now=now, detail="fixed the store")
    handler.run_raises = None
    (claim,) = scheduler_claim_due(now=now)
    assert scheduler_execute(scheduler_id=pk, token=claim.token, now=now) == "completed"
    row = DueWork.objects.get(pk=pk)
    assert (row.status, row.retry_count, row.is_on_support_hold) == ("completed", 4, False)
    assert not scheduler_hold_release(scheduler_id=pk, now=now)
