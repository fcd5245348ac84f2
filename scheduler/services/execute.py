"""Running claimed rows through their handlers, and the due poll that fans them out.

The handler's revalidation and run commit in one transaction with ``Completed WHERE version =
token``: if the claim was lost meanwhile (lease expired and the row was claimed again, or the
event path deactivated it), the completion matches no row and the handler's database writes
roll back with it. Large diagnostics go to ``default_storage``; the row keeps only the name.
"""

from __future__ import annotations

import json
import logging
import traceback
from collections import Counter
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any

from django.conf import settings
from django.core.files.base import ContentFile
from django.core.files.storage import default_storage
from django.db import transaction
from django.utils import timezone

from scheduler.registry import (
    Deactivate,
    HoldForSupport,
    PermanentFailure,
    RetryableFailure,
    SchedulerJob,
    SchedulerOutcome,
    Trace,
    scheduler_handler_for,
)
from scheduler.selectors import scheduler_claimed_job
from scheduler.services.claim import ClaimedRow, scheduler_claim_due
from scheduler.services.finish import (
    scheduler_complete,
    scheduler_deactivate,
    scheduler_fail,
    scheduler_hold,
    scheduler_unclaim,
)
from scheduler.services.moves import FinishOutcome
from scheduler.states import SchedulerReason, SchedulerStatus

logger = logging.getLogger(__name__)


class _ClaimLost(Exception):
    """Raised inside the handler's transaction to roll its writes back."""


def scheduler_execute(
    *, scheduler_id: int, token: int, now: datetime | None = None
) -> FinishOutcome:
    """Run one claimed row: revalidate, run, complete — or record the typed outcome."""
    now = now or timezone.now()
    job = scheduler_claimed_job(scheduler_id=scheduler_id, token=token, now=now)
    if job is None:
        return FinishOutcome.LOST
    handler = scheduler_handler_for(job.automation_type)
    if handler is None:
        missing = RetryableFailure(
            f"no handler registered for {job.automation_type}",
            reason=SchedulerReason.HANDLER_MISSING,
        )
        return _record(job, missing)
    try:
        with transaction.atomic():
            handler.revalidate(job)
            result = handler.run(job)
            coordinates = _small(result.coordinates)
            blob = _trace_save(job, "completed", result.trace)
            done = scheduler_complete(
                scheduler_id=scheduler_id,
                token=token,
                coordinates=coordinates,
                now=now,
                trace_blob_name=blob,
            )
            if not done:
                raise _ClaimLost
    except _ClaimLost:
        logger.info("scheduler row %s: claim %s lost before completion", scheduler_id, token)
        return FinishOutcome.LOST
    except SchedulerOutcome as outcome:
        return _record(job, outcome)
    except Exception as exc:  # a handler bug or a transient error: retried on the ladder
        logger.exception("scheduler row %s (%s) failed", scheduler_id, job.scheduler_key)
        failure = RetryableFailure(
            f"{type(exc).__name__}: {exc}", trace={"traceback": traceback.format_exc()}
        )
        return _record(job, failure)
    return FinishOutcome.COMPLETED


def _record(job: SchedulerJob, outcome: SchedulerOutcome) -> FinishOutcome:
    blob = _trace_save(job, outcome.reason, outcome.trace)
    common: dict[str, Any] = {
        "scheduler_id": job.scheduler_id,
        "token": job.token,
        "now": job.now,
        "detail": outcome.detail[:500],
        "trace_blob_name": blob,
    }
    if isinstance(outcome, Deactivate):
        ok = scheduler_deactivate(reason=outcome.reason, **common)
        return FinishOutcome.DEACTIVATED if ok else FinishOutcome.LOST
    if isinstance(outcome, HoldForSupport):
        ok = scheduler_hold(from_status=SchedulerStatus.PROCESSING, reason=outcome.reason, **common)
        return FinishOutcome.HELD if ok else FinishOutcome.LOST
    retryable = not isinstance(outcome, PermanentFailure)
    return scheduler_fail(reason=outcome.reason, retryable=retryable, **common)


def _small(coordinates: Mapping[str, Any]) -> dict[str, Any]:
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


def _trace_save(job: SchedulerJob, label: str, trace: Trace | None) -> str:
    """Write diagnostics to file storage; the name goes to TraceBlobName. A storage error is
    logged and never decides the row's outcome."""
    if trace is None:
        return ""
    if isinstance(trace, bytes):
        body = trace
    elif isinstance(trace, str):
        body = trace.encode()
    else:
        envelope = {"schedulerKey": job.scheduler_key, "token": job.token, "outcome": label}
        envelope.update(trace)
        body = json.dumps(envelope, default=str, indent=1).encode()
    name = f"{settings.SCHEDULER_TRACE_PREFIX}/{job.scheduler_id}/v{job.token}-{label}.json"
    try:
        return str(default_storage.save(name, ContentFile(body)))
    except Exception as exc:
        logger.warning("scheduler trace %s not written: %s", name, exc)
        return ""


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
        for row in rows:
            outcome = scheduler_execute(scheduler_id=row.scheduler_id, token=row.token, now=clock())
            outcomes[outcome] += 1
    return outcomes
