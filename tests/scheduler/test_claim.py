"""Claiming: only due rows, in bounded batches, each by exactly one claimer; every later change
must carry the claim's token. On PostgreSQL the due select is a partial-index scan and
concurrent pollers (two beats) take disjoint rows."""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest
from django.db import connection

from scheduler.models import DueWork
from scheduler.selectors import scheduler_due_explain
from scheduler.services import (
    ClaimedRow,
    ClaimStrategy,
    scheduler_claim_due,
    scheduler_complete,
    scheduler_deactivate,
    scheduler_due_fan_out,
    scheduler_fail,
)
from scheduler.states import SchedulerReason
from tests.scheduler.conftest import NOW, due_rows, ensure_report

pytestmark = pytest.mark.django_db


def test_claim_takes_only_due_pending_unheld_rows() -> None:
    due = ensure_report().scheduler_id
    ensure_report(scheduled_on=NOW + timedelta(minutes=1))  # not yet due
    waiting = ensure_report().scheduler_id
    DueWork.objects.filter(pk=waiting).update(next_retry_on=NOW + timedelta(minutes=5))
    held = ensure_report().scheduler_id
    DueWork.objects.filter(pk=held).update(is_on_support_hold=True)
    claimed = scheduler_claim_due(now=NOW)
    assert [c.scheduler_id for c in claimed] == [due]
    row = DueWork.objects.get(pk=due)
    assert row.status == "processing"
    assert row.version == claimed[0].token == 1
    assert row.processing_lease_expires_on == NOW + timedelta(seconds=300)
    later = scheduler_claim_due(now=NOW + timedelta(minutes=5))
    assert {c.scheduler_id for c in later} == {waiting} | {
        r.pk for r in DueWork.objects.filter(scheduled_on=NOW + timedelta(minutes=1))
    }


def test_claims_are_bounded_and_never_overlap() -> None:
    ids = set(due_rows(120))
    first = scheduler_claim_due(now=NOW, limit=50)
    second = scheduler_claim_due(now=NOW, limit=50)
    third = scheduler_claim_due(now=NOW, limit=50)
    assert (len(first), len(second), len(third)) == (50, 50, 20)
    got = [c.scheduler_id for c in first + second + third]
    assert len(set(got)) == 120 and set(got) == ids
    assert scheduler_claim_due(now=NOW) == []


def test_a_stale_token_changes_nothing() -> None:
    ensure_report()
    (claim,) = scheduler_claim_due(now=NOW)
    stale = claim.token - 1
    assert not scheduler_complete(
        scheduler_id=claim.scheduler_id, token=stale, coordinates={}, now=NOW
    )
    assert (
        scheduler_fail(
            scheduler_id=claim.scheduler_id,
            token=stale,
            reason=SchedulerReason.HANDLER_ERROR,
            now=NOW,
        )
        == "lost"
    )
    assert not scheduler_deactivate(
        scheduler_id=claim.scheduler_id,
        token=stale,
        reason=SchedulerReason.SOURCE_NO_LONGER_VALID,
        now=NOW,
    )
    row = DueWork.objects.get(pk=claim.scheduler_id)
    assert (row.status, row.version) == ("processing", claim.token)
    assert scheduler_complete(
        scheduler_id=claim.scheduler_id, token=claim.token, coordinates={"id": 1}, now=NOW
    )
    assert not scheduler_complete(
        scheduler_id=claim.scheduler_id, token=claim.token, coordinates={"id": 2}, now=NOW
    )
    assert DueWork.objects.get(pk=claim.scheduler_id).dispatch_result_json == {"id": 1}


def test_fan_out_hands_each_claimed_row_off_once_and_stays_bounded() -> None:
    due_rows(30)
    sent: list[ClaimedRow] = []
    assert scheduler_due_fan_out(now=NOW, enqueue=sent.extend, batch=8, max_rows=20, chunk=3) == 20
    assert len({r.scheduler_id for r in sent}) == 20 == len(sent)
    assert scheduler_due_fan_out(now=NOW, enqueue=sent.extend, batch=8, max_rows=100) == 10
    assert len({r.scheduler_id for r in sent}) == 30 == len(sent)


def test_a_row_the_broker_refused_is_unclaimed_without_counting_an_attempt() -> None:
    pk = ensure_report().scheduler_id

    def broker_down(rows: list[ClaimedRow]) -> None:
        raise ConnectionError("broker unreachable")

    assert scheduler_due_fan_out(now=NOW, enqueue=broker_down) == 1
    row = DueWork.objects.get(pk=pk)
    assert (row.status, row.retry_count, row.next_retry_on) == ("pending", 0, None)
    assert [c.scheduler_id for c in scheduler_claim_due(now=NOW)] == [pk]


@pytest.mark.postgres
@pytest.mark.parametrize("strategy", [ClaimStrategy.SKIP_LOCKED, ClaimStrategy.ROWWISE])
def test_both_claim_strategies_claim_the_same_due_rows(strategy) -> None:
    due = set(due_rows(10))
    due_rows(5, scheduled_on=NOW + timedelta(hours=1))
    claimed = scheduler_claim_due(now=NOW, limit=100, strategy=strategy)
    assert {c.scheduler_id for c in claimed} == due
    assert all(c.token == 1 for c in claimed)


@pytest.mark.postgres
def test_due_query_is_a_partial_index_scan() -> None:
    """History (completed rows) and future rows do not make the due query scan the table."""
    due_rows(3000)
    DueWork.objects.update(status="completed")
    due_rows(500, scheduled_on=NOW + timedelta(days=3))
    due_rows(20)
    with connection.cursor() as cursor:
        cursor.execute(f"ANALYZE {DueWork._meta.db_table}")
    plan = scheduler_due_explain(now=NOW, limit=50)
    print(plan)
    assert "Index Scan using scheduler_due_idx" in plan
    assert "Seq Scan" not in plan


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_two_beats_polling_at_once_fan_out_each_row_once() -> None:
    ids = set(due_rows(600))
    barrier = threading.Barrier(2)
    sent: list[list[int]] = [[], []]

    def beat(n: int) -> None:
        try:
            barrier.wait()
            while scheduler_due_fan_out(
                now=NOW, enqueue=lambda rows: sent[n].extend(r.scheduler_id for r in rows), batch=25
            ):
                pass
        finally:
            connection.close()

    threads = [threading.Thread(target=beat, args=(n,)) for n in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(sent[0]) + len(sent[1]) == 600
    assert set(sent[0]) | set(sent[1]) == ids
    assert not set(sent[0]) & set(sent[1])
    assert sent[0] and sent[1]
