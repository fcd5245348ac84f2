"""Running a batch of claimed rows of one handler together: the handler's batch entry point
and every row's end commit in one transaction, the ends written set-based (one guarded
UPDATE per kind of end, one INSERT of their audit rows), so a batch of fifty costs the
statements of a batch of one.

The per-row path (``services.execute``) stays the reference: anything a batch cannot finish
exactly as planned (a claim lost meanwhile, a result too large, a handler that raised or
skipped a row) rolls the whole batch back, and its rows run one by one, each in its own
transaction, with the per-row guarantees. So a row still fires once: its end is ``WHERE
status = Processing AND version = token`` with its audit row, and the handler's writes
commit only together with every end of the batch.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from django.conf import settings
from django.db import transaction

from common.json_types import JsonObject, JsonValue
from common.ledger import ledger_move
from scheduler.registry import (
    Deactivate,
    HandlerResult,
    HoldForSupport,
    PermanentFailure,
    SchedulerBatchHandler,
    SchedulerJob,
    SchedulerOutcome,
)
from scheduler.services.finish import COMPLETE, DEACTIVATE, FAIL, HOLD, RETRY, Ending
from scheduler.services.moves import (
    DUE_WORK,
    DueWorkFields,
    scheduler_backoff,
    scheduler_moving,
)
from scheduler.services.trace import TraceBatch
from scheduler.states import FinishOutcome, SchedulerReason, SchedulerStatus
from scheduler.trace_storage import trace_blob_save

logger = logging.getLogger(__name__)
P = SchedulerStatus.PROCESSING


class _Replay(Exception):
    """Raised inside the batch's transaction: roll it back and run its rows one by one."""


@dataclass(frozen=True)
class PlannedEnd:
    """How one row of a batch ends: the move (``ending`` plus ``fields``), its audit reason
    and detail, and what its trace record says (``outcome``, ``trace_reason``,
    ``trace_detail``, ``coordinates``, ``blob``)."""

    job: SchedulerJob
    ending: Ending
    outcome: FinishOutcome
    reason: str = ""
    detail: str = ""
    fields: DueWorkFields = field(default_factory=lambda: DueWorkFields())
    trace_reason: str = ""
    trace_detail: str = ""
    coordinates: JsonObject | None = None
    blob: str = ""


def scheduler_execute_batch(
    *,
    handler: SchedulerBatchHandler,
    jobs: Sequence[SchedulerJob],
    trace: TraceBatch,
) -> list[FinishOutcome] | None:
    """Run ``jobs`` (claimed rows of one type, read at the same ``now``) through the handler's
    batch entry point and end them all in one transaction; their trace records join
    ``trace``. None when the batch rolled back: the caller runs the rows one by one."""
    if not jobs:
        return []
    began = time.perf_counter()
    try:
        with transaction.atomic():
            results = handler.run_batch(jobs)
            plans = [_plan(job, results.get(job.scheduler_id)) for job in jobs]
            moved = scheduler_finish_batch(plans, now=jobs[0].now)
            if moved != {job.scheduler_id for job in jobs}:
                raise _Replay("a claim was lost during the batch")
    except _Replay as exc:
        logger.info("scheduler batch of %d rows replayed one by one: %s", len(jobs), exc)
        return None
    except Exception:
        logger.exception("scheduler batch of %d %s rows failed", len(jobs), jobs[0].automation_type)
        return None
    duration = (time.perf_counter() - began) / len(jobs)
    for plan in plans:
        trace.add(
            job=plan.job,
            outcome=plan.outcome,
            started_at=plan.job.now,
            duration_s=duration,
            reason=plan.trace_reason,
            detail=plan.trace_detail,
            coordinates=plan.coordinates,
            trace_blob_name=plan.blob,
        )
    return [plan.outcome for plan in plans]


def scheduler_result_small(coordinates: Mapping[str, JsonValue]) -> JsonObject:
    """DispatchResultJson holds coordinates, not payloads (docs/spec.md §4)."""
    value = dict(coordinates)
    size = len(json.dumps(value, default=str).encode())
    if size > settings.SCHEDULER_RESULT_MAX_BYTES:
        raise PermanentFailure(
            f"dispatch result of {size} bytes exceeds {settings.SCHEDULER_RESULT_MAX_BYTES}; "
            "put large data in the trace",
            reason=SchedulerReason.RESULT_TOO_LARGE,
        )
    return value


def _plan(job: SchedulerJob, result: HandlerResult | SchedulerOutcome | None) -> PlannedEnd:
    if result is None:
        raise _Replay(f"the handler returned nothing for row {job.scheduler_id}")
    if isinstance(result, SchedulerOutcome):
        blob = trace_blob_save(job, result.reason, result.trace)
        return scheduler_plan_outcome(job, result, blob=blob)
    try:
        coordinates = scheduler_result_small(result.coordinates)
    except PermanentFailure as exc:  # its writes are in the batch: the per-row path undoes them
        raise _Replay(str(exc)) from None
    blob = trace_blob_save(job, "completed", result.trace)
    fields = DueWorkFields(dispatch_result_json=coordinates, completed_on=job.now)
    return PlannedEnd(
        job, COMPLETE, FinishOutcome.COMPLETED, fields=fields, coordinates=coordinates, blob=blob
    )


def scheduler_plan_outcome(
    job: SchedulerJob, outcome: SchedulerOutcome, *, blob: str
) -> PlannedEnd:
    """The end a typed outcome gives a claimed row, as ``services.execute._record`` and
    ``services.finish`` decide it one row at a time: deactivated, held, failed, or retried on
    the backoff ladder (held past its last step)."""
    detail = outcome.detail[:500]
    reason = str(outcome.reason)
    kept = DueWorkFields(failure_reason_code=reason)

    def end(ending: Ending, ended: FinishOutcome, audit_detail: str) -> PlannedEnd:
        return PlannedEnd(
            job, ending, ended, reason, audit_detail, kept,
            trace_reason=reason, trace_detail=detail, blob=blob,
        )  # fmt: skip

    if isinstance(outcome, Deactivate):
        return end(DEACTIVATE, FinishOutcome.DEACTIVATED, detail)
    if isinstance(outcome, HoldForSupport):
        return end(HOLD, FinishOutcome.HELD, detail)
    if isinstance(outcome, PermanentFailure):
        return end(FAIL, FinishOutcome.FAILED, detail)
    attempts = job.retry_count + 1
    wait = scheduler_backoff(attempts)
    note = f"attempt {attempts} failed" + (": support hold" if wait is None else "")
    noted = f"{note}; {detail}" if detail else note
    kept["retry_count"] = attempts
    if wait is None:
        return end(HOLD, FinishOutcome.HELD, noted)
    kept["next_retry_on"] = job.now + wait
    return end(RETRY, FinishOutcome.RETRY_SCHEDULED, noted)


def scheduler_finish_batch(plans: Sequence[PlannedEnd], *, now: datetime) -> set[int]:
    """End every planned row from Processing at its token: one guarded UPDATE per kind of end
    (the kinds, not the rows, decide how many) with the audit rows of the rows that moved,
    each copying what the move wrote (``common.ledger``). The ids that moved."""
    moves = [
        scheduler_moving(
            plan.job.scheduler_id,
            plan.job.token,
            P,
            plan.ending.to,
            plan.reason,
            plan.detail or plan.ending.detail,
            plan.ending.columns(plan.reason, plan.blob, plan.fields),
        )
        for plan in plans
    ]
    return {int(pk) for pk in ledger_move(DUE_WORK, moves, now=now)}
