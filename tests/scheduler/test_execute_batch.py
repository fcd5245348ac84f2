"""Execution set-based by handler: the claimed rows of a handler with a batch entry point run
in one transaction with one read, the handler's batch and one finishing write per kind of
end, so a batch of 50 costs the statements of a batch of 1. Each row ends exactly as the
per-row path ends it (row, audit row, trace record); anything the batch cannot finish as
planned rolls back and runs row by row."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from scheduler.models import AutomationType, DueWork, DueWorkTransition, TraceRecord
from scheduler.registry import (
    HandlerResult,
    HoldForSupport,
    PermanentFailure,
    RetryableFailure,
    SchedulerJob,
    SchedulerOutcome,
    SourceNoLongerValid,
    scheduler_handler_override,
)
from scheduler.services import (
    scheduler_claim_due,
    scheduler_deactivate_by_key,
    scheduler_execute_chunk,
)
from scheduler.states import SchedulerReason
from tests.scheduler.conftest import NOW, due_rows, effect_counts, effect_insert

pytestmark = pytest.mark.django_db


@dataclass
class BatchHandler:
    """Writes one effect row per row it completes, in one statement per batch; ``outcomes``
    say which rows end otherwise; ``during`` runs inside the batch (to lose a claim)."""

    outcomes: dict[int, SchedulerOutcome] = field(default_factory=dict)
    coordinates: dict[str, Any] = field(default_factory=lambda: {"notificationId": 7})
    write_effect: bool = False
    raises: BaseException | None = None
    during: Any = None
    batches: list[list[int]] = field(default_factory=list)
    singles: list[int] = field(default_factory=list)

    def revalidate(self, job: SchedulerJob) -> None:
        if job.scheduler_id in self.outcomes:
            raise self.outcomes[job.scheduler_id]

    def run(self, job: SchedulerJob) -> HandlerResult:
        self.singles.append(job.scheduler_id)
        if self.write_effect:
            effect_insert(job.scheduler_key, job.token)
        return HandlerResult(coordinates=self.coordinates)

    def run_batch(
        self, jobs: Sequence[SchedulerJob]
    ) -> Mapping[int, HandlerResult | SchedulerOutcome]:
        self.batches.append([job.scheduler_id for job in jobs])
        if self.raises is not None:
            raise self.raises
        if self.during is not None:
            self.during()
        results: dict[int, HandlerResult | SchedulerOutcome] = {}
        for job in jobs:
            results[job.scheduler_id] = self.outcomes.get(
                job.scheduler_id, HandlerResult(coordinates=self.coordinates)
            )
        done = [job for job in jobs if job.scheduler_id not in self.outcomes]
        if self.write_effect and done:
            values = ", ".join(["(%s, %s)"] * len(done))
            params = [v for job in done for v in (job.scheduler_key, job.token)]
            with connection.cursor() as cursor:
                cursor.execute(
                    f"INSERT INTO test_scheduler_effect (scheduler_key, token) VALUES {values}",
                    params,
                )
        return results


@pytest.fixture
def batch_handler() -> Iterator[BatchHandler]:
    handler = BatchHandler()
    with scheduler_handler_override(AutomationType.REPORT_SUBSCRIPTION, handler):
        yield handler


def _claim(limit: int = 100) -> list[tuple[int, int]]:
    return [(c.scheduler_id, c.token) for c in scheduler_claim_due(now=NOW, limit=limit)]


def _statements(n: int, capture: Any) -> list[str]:
    due_rows(n)
    rows = _claim(limit=n)
    assert len(rows) == n
    with CaptureQueriesContext(connection) as queries, capture(execute=True):
        assert scheduler_execute_chunk(rows=rows, clock=lambda: NOW) == {"completed": n}
    return [q["sql"] for q in queries.captured_queries]


def test_a_batch_of_50_costs_the_statements_of_a_batch_of_1(
    batch_handler, django_capture_on_commit_callbacks
) -> None:
    one = _statements(1, django_capture_on_commit_callbacks)
    fifty = _statements(50, django_capture_on_commit_callbacks)
    assert len(fifty) == len(one), (one, fifty)
    # the claimed rows' read, BEGIN/savepoint, one guarded UPDATE, the audit INSERT, the
    # commit, then the trace: the farms' read and its INSERT (in a savepoint of its own)
    assert len(one) <= 9, one
    assert batch_handler.singles == [] and [len(b) for b in batch_handler.batches] == [1, 50]
    assert DueWork.objects.filter(status="completed").count() == 51
    assert DueWorkTransition.objects.filter(to_status="completed").count() == 51
    assert TraceRecord.objects.filter(outcome="completed").count() == 51


def test_each_row_of_a_batch_ends_as_the_per_row_path_ends_it(
    batch_handler, django_capture_on_commit_callbacks, settings: Any
) -> None:
    ids = due_rows(6)
    DueWork.objects.filter(pk=ids[4]).update(retry_count=2)
    DueWork.objects.filter(pk=ids[5]).update(retry_count=len(settings.SCHEDULER_BACKOFF_MINUTES))
    batch_handler.outcomes = {
        ids[1]: SourceNoLongerValid("document deleted"),
        ids[2]: HoldForSupport("reloaded input differs"),
        ids[3]: PermanentFailure("template missing", trace="diagnostics"),
        ids[4]: RetryableFailure("mail server down"),
        ids[5]: RetryableFailure("still down"),
    }
    rows = _claim()
    with django_capture_on_commit_callbacks(execute=True):
        outcomes = scheduler_execute_chunk(rows=rows, clock=lambda: NOW)
    ended = {"completed": 1, "deactivated": 1, "held": 2, "failed": 1, "retry_scheduled": 1}
    assert outcomes == ended
    assert batch_handler.singles == []
    got = {r.pk: r for r in DueWork.objects.filter(pk__in=ids)}
    assert (got[ids[0]].status, got[ids[0]].completed_on) == ("completed", NOW)
    assert got[ids[0]].dispatch_result_json == {"notificationId": 7}
    assert (got[ids[1]].status, got[ids[1]].failure_reason_code) == (
        "deactivated",
        SchedulerReason.SOURCE_NO_LONGER_VALID,
    )
    assert (got[ids[2]].status, got[ids[2]].is_on_support_hold) == ("pending", True)
    assert got[ids[2]].failure_reason_code == SchedulerReason.INPUT_HASH_CONFLICT
    assert (got[ids[3]].status, got[ids[3]].retry_count) == ("failed", 0)
    assert got[ids[3]].trace_blob_name != ""
    wait = settings.SCHEDULER_BACKOFF_MINUTES[2]
    assert (got[ids[4]].status, got[ids[4]].retry_count) == ("pending", 3)
    assert (got[ids[4]].next_retry_on - NOW).total_seconds() == wait * 60
    assert (got[ids[5]].status, got[ids[5]].is_on_support_hold) == ("pending", True)
    for row in got.values():
        assert row.processing_lease_expires_on is None and row.version == 2
    audits = {a.scheduler_id: a for a in DueWorkTransition.objects.filter(scheduler_id__in=ids)}
    assert len(audits) == 6
    for pk, row in got.items():
        audit = audits[pk]
        assert (audit.from_status, audit.to_status) == ("processing", row.status)
        assert (audit.version, audit.retry_count, audit.at) == (2, row.retry_count, NOW)
    assert audits[ids[2]].detail == "reloaded input differs"
    assert audits[ids[4]].detail == "attempt 3 failed; mail server down"
    assert audits[ids[5]].detail.startswith("attempt 4 failed: support hold")
    traced = dict(TraceRecord.objects.values_list("scheduler_id", "outcome"))
    assert traced == {pk: str(o) for pk, o in zip(ids, _expected(), strict=True)}


def _expected() -> list[str]:
    return ["completed", "deactivated", "held", "failed", "retry_scheduled", "held"]


def test_a_claim_lost_during_the_batch_rolls_it_back_and_the_rows_run_one_by_one(
    batch_handler, effect_table, django_capture_on_commit_callbacks
) -> None:
    ids = due_rows(3)
    rows = _claim()
    lost = DueWork.objects.get(pk=ids[1])
    batch_handler.write_effect = True

    def lose_one_claim() -> None:
        if len(batch_handler.batches) == 1:
            assert scheduler_deactivate_by_key(
                scheduler_key=lost.scheduler_key, reason=SchedulerReason.SETTING_CHANGED, now=NOW
            )

    batch_handler.during = lose_one_claim
    with django_capture_on_commit_callbacks(execute=True):
        outcomes = scheduler_execute_chunk(rows=rows, clock=lambda: NOW)
    # The finish moved 2 of 3 rows: the batch rolled back whole (its effect rows, and the
    # deactivation made on its connection), then each row ran on the per-row path.
    assert sum(outcomes.values()) == 3 and len(batch_handler.batches) == 1
    counts = effect_counts()
    assert all(n == 1 for n in counts.values())  # nothing the batch wrote survived twice
    assert DueWork.objects.filter(pk__in=ids, status="completed").count() == len(counts)


def test_a_claim_already_gone_is_left_out_of_the_batch(
    batch_handler, effect_table, django_capture_on_commit_callbacks
) -> None:
    ids = due_rows(3)
    rows = _claim()
    gone = DueWork.objects.get(pk=ids[0])
    assert scheduler_deactivate_by_key(
        scheduler_key=gone.scheduler_key, reason=SchedulerReason.SETTING_CHANGED, now=NOW
    )
    batch_handler.write_effect = True
    with django_capture_on_commit_callbacks(execute=True):
        assert scheduler_execute_chunk(rows=rows, clock=lambda: NOW) == {"completed": 2, "lost": 1}
    assert batch_handler.batches == [ids[1:]]
    assert gone.scheduler_key not in effect_counts()
    assert not TraceRecord.objects.filter(scheduler_id=ids[0]).exists()


def test_a_batch_that_raises_runs_its_rows_one_by_one(
    batch_handler, django_capture_on_commit_callbacks
) -> None:
    ids = due_rows(3)
    batch_handler.raises = RuntimeError("batch bug")
    batch_handler.outcomes = {ids[2]: SourceNoLongerValid("gone")}
    with django_capture_on_commit_callbacks(execute=True):
        outcomes = scheduler_execute_chunk(rows=_claim(), clock=lambda: NOW)
    assert outcomes == {"completed": 2, "deactivated": 1}
    assert batch_handler.singles == ids[:2]


def test_oversized_coordinates_roll_the_batch_back_and_fail_on_the_per_row_path(
    batch_handler, effect_table, django_capture_on_commit_callbacks
) -> None:
    due_rows(2)
    batch_handler.coordinates = {"rendered": "x" * 10_000}
    batch_handler.write_effect = True
    with django_capture_on_commit_callbacks(execute=True):
        assert scheduler_execute_chunk(rows=_claim(), clock=lambda: NOW) == {"failed": 2}
    assert effect_counts() == {}  # the batch's writes and each row's rolled back
    reasons = set(DueWork.objects.values_list("failure_reason_code", flat=True))
    assert reasons == {SchedulerReason.RESULT_TOO_LARGE}
