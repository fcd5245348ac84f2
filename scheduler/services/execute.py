"""Running claimed rows through their handlers, and the due poll that fans them out.

The handler's revalidation and run commit in one transaction with ``Completed WHERE version =
token``: if the claim was lost meanwhile (lease expired and the row was claimed again, or the
event path deactivated it), the completion matches no row and the handler's database writes
roll back with it. Large diagnostics go to the trace storage; the row keeps only the name.
Each execution appends one trace record after its chunk committed (``services.trace``).
"""

from __future__ import annotations

import logging
import time
import traceback
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from datetime import datetime

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from common.json_types import JsonValue
from scheduler.registry import (
    Deactivate,
    HoldForSupport,
    PermanentFailure,
    RetryableFailure,
    SchedulerHandler,
    SchedulerJob,
    SchedulerOutcome,
    scheduler_handler_batched,
    scheduler_handler_for,
)
from scheduler.selectors import scheduler_claimed_job, scheduler_claimed_jobs
from scheduler.services.batch import scheduler_execute_batch, scheduler_result_small
from scheduler.services.claim import ClaimedRow, scheduler_claim_due
from scheduler.services.finish import (
    RowEnd,
    scheduler_complete,
    scheduler_deactivate,
    scheduler_fail,
    scheduler_hold,
    scheduler_unclaim,
)
from scheduler.services.trace import TraceBatch
from scheduler.states import FinishOutcome, SchedulerReason, SchedulerStatus
from scheduler.trace_storage import trace_blob_save

logger = logging.getLogger(__name__)


class _ClaimLost(Exception):
    """Raised inside the handler's transaction to roll its writes back."""


@dataclass
class _Attempt:
    """How one execution ended, for its trace record."""

    outcome: FinishOutcome
    reason: str = ""
    detail: str = ""
    coordinates: Mapping[str, JsonValue] | None = None
    blob: str = ""


def scheduler_execute(
    *, scheduler_id: int, token: int, now: datetime | None = None, trace: TraceBatch | None = None
) -> FinishOutcome:
    """Run one claimed row: revalidate, run, complete — or record the typed outcome. Its trace
    record joins ``trace`` (written by whoever flushes it), or is written after commit."""
    now = now or timezone.now()
    job = scheduler_claimed_job(scheduler_id=scheduler_id, token=token, now=now)
    if job is None:  # a redelivery, or the row moved on: nothing runs, nothing is traced
        return FinishOutcome.LOST
    batch = trace if trace is not None else TraceBatch()
    outcome = _execute_one(job, batch)
    if trace is None:
        batch.flush()
    return outcome


def _execute_one(job: SchedulerJob, trace: TraceBatch) -> FinishOutcome:
    began = time.perf_counter()
    attempt = _attempt(job)
    trace.add(
        job=job,
        outcome=attempt.outcome,
        started_at=job.now,
        duration_s=time.perf_counter() - began,
        reason=attempt.reason,
        detail=attempt.detail,
        coordinates=attempt.coordinates,
        trace_blob_name=attempt.blob,
    )
    return attempt.outcome


def scheduler_execute_chunk(
    *, rows: Iterable[tuple[int, int]], clock: Callable[[], datetime] = timezone.now
) -> Counter[str]:
    """The claimed (id, token) rows, read in one statement and run by handler: the rows of a
    handler with a batch entry point in one transaction (``services.batch``), the others
    each in its own. Then the chunk's trace records in one INSERT (also when a row raised:
    the rows before it did run). A claim no longer held counts as lost, untraced."""
    claims = list(rows)
    outcomes: Counter[str] = Counter()
    batch = TraceBatch()
    try:
        jobs = scheduler_claimed_jobs(claims=claims, now=clock())
        outcomes[str(FinishOutcome.LOST)] += len(claims) - len(jobs)
        by_type: dict[str, list[SchedulerJob]] = {}
        for job in jobs:
            by_type.setdefault(job.automation_type, []).append(job)
        for automation_type, group in by_type.items():
            for outcome in _execute_group(automation_type, group, batch, clock):
                outcomes[str(outcome)] += 1
    finally:
        batch.flush()
    return +outcomes


def _execute_group(
    automation_type: str,
    jobs: list[SchedulerJob],
    trace: TraceBatch,
    clock: Callable[[], datetime],
) -> list[FinishOutcome]:
    """One batch when the type's handler takes batches (and it finished as planned), else
    each row in its own transaction with the clock read per row, as before batches."""
    handler = scheduler_handler_for(automation_type)
    batched = scheduler_handler_batched(handler) if handler is not None else None
    if batched is not None:
        done = scheduler_execute_batch(handler=batched, jobs=jobs, trace=trace)
        if done is not None:
            return done
    return [_execute_one(replace(job, now=clock()), trace) for job in jobs]


def _attempt(job: SchedulerJob) -> _Attempt:
    handler = scheduler_handler_for(job.automation_type)
    if handler is None:
        missing = RetryableFailure(
            f"no handler registered for {job.automation_type}",
            reason=SchedulerReason.HANDLER_MISSING,
        )
        return _record(job, missing)
    return _run(job, handler)


def _run(job: SchedulerJob, handler: SchedulerHandler) -> _Attempt:
    lost = _Attempt(FinishOutcome.LOST, detail="claim lost before completion")
    try:
        with transaction.atomic():
            handler.revalidate(job)
            result = handler.run(job)
            coordinates = scheduler_result_small(result.coordinates)
            lost.blob = trace_blob_save(job, "completed", result.trace)
            done = scheduler_complete(
                scheduler_id=job.scheduler_id,
                token=job.token,
                coordinates=coordinates,
                now=job.now,
                trace_blob_name=lost.blob,
            )
            if not done:
                raise _ClaimLost
    except _ClaimLost:
        logger.info(
            "scheduler row %s: claim %s lost before completion", job.scheduler_id, job.token
        )
        return lost
    except SchedulerOutcome as outcome:
        return _record(job, outcome)
    except Exception as exc:  # a handler bug or a transient error: retried on the ladder
        logger.exception("scheduler row %s (%s) failed", job.scheduler_id, job.scheduler_key)
        failure = RetryableFailure(
            f"{type(exc).__name__}: {exc}", trace={"traceback": traceback.format_exc()}
        )
        return _record(job, failure)
    return _Attempt(FinishOutcome.COMPLETED, coordinates=coordinates, blob=lost.blob)


def _record(job: SchedulerJob, outcome: SchedulerOutcome) -> _Attempt:
    blob = trace_blob_save(job, outcome.reason, outcome.trace)
    detail = outcome.detail[:500]
    common = RowEnd(
        scheduler_id=job.scheduler_id,
        token=job.token,
        now=job.now,
        detail=detail,
        trace_blob_name=blob,
    )
    if isinstance(outcome, Deactivate):
        ok = scheduler_deactivate(reason=outcome.reason, **common)
        ended = FinishOutcome.DEACTIVATED if ok else FinishOutcome.LOST
    elif isinstance(outcome, HoldForSupport):
        ok = scheduler_hold(from_status=SchedulerStatus.PROCESSING, reason=outcome.reason, **common)
        ended = FinishOutcome.HELD if ok else FinishOutcome.LOST
    else:
        retryable = not isinstance(outcome, PermanentFailure)
        ended = scheduler_fail(reason=outcome.reason, retryable=retryable, **common)
    return _Attempt(ended, reason=outcome.reason, detail=detail, blob=blob)


def scheduler_due_fan_out(
    *,
    now: datetime,
    enqueue: Callable[[list[ClaimedRow]], None],
    batch: int | None = None,
    max_rows: int | None = None,
    chunk: int | None = None,
) -> int:
    """Claim due rows in bounded batches and hand them to ``enqueue`` in chunks of ``chunk``
    rows (one execute task per chunk, so a worker pays the task's overhead once per chunk
    while several workers still share a batch). Safe with two beats: claims never overlap.
    Rows whose hand-off fails are unclaimed at once rather than waiting for their lease."""
    batch = batch or settings.SCHEDULER_CLAIM_BATCH
    max_rows = max_rows or settings.SCHEDULER_POLL_MAX_ROWS
    chunk = chunk or settings.SCHEDULER_EXECUTE_CHUNK
    total = 0
    while total < max_rows:
        limit = min(batch, max_rows - total)
        rows = scheduler_claim_due(now=now, limit=limit)
        for start in range(0, len(rows), chunk):
            part = rows[start : start + chunk]
            try:
                enqueue(part)
            except Exception as exc:
                logger.warning("%d scheduler rows not handed off: %s", len(part), exc)
                for row in part:
                    scheduler_unclaim(scheduler_id=row.scheduler_id, token=row.token, now=now)
        total += len(rows)
        if len(rows) < limit:
            break
    return total


def scheduler_process_due(
    *,
    clock: Callable[[], datetime] = timezone.now,
    batch: int | None = None,
    max_rows: int | None = None,
) -> Counter[str]:
    """Claim and execute inline until nothing is due (or ``max_rows``): the embedded runtime's
    worker loop, and what benchmark and test worker processes run."""
    outcomes: Counter[str] = Counter()
    batch = batch or settings.SCHEDULER_CLAIM_BATCH
    while max_rows is None or sum(outcomes.values()) < max_rows:
        rows = scheduler_claim_due(now=clock(), limit=batch)
        if not rows:
            break
        outcomes += scheduler_execute_chunk(
            rows=[(row.scheduler_id, row.token) for row in rows], clock=clock
        )
    return outcomes
