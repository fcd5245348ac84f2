"""Ending an attempt (complete, fail, deactivate, hold, unclaim), the event path's deactivate
and cancel, support's hold release, and stale-lease cleanup. Every change is
``WHERE version = token``: a worker whose lease expired cannot overwrite a newer claim."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.conf import settings
from django.utils import timezone

from scheduler.models import DueWork
from scheduler.selectors import scheduler_stale
from scheduler.services.moves import (
    FinishOutcome,
    scheduler_move,
    scheduler_retry_or_hold,
)
from scheduler.states import (
    SCHEDULER_DEACTIVATION_REASONS,
    SCHEDULER_OPEN,
    SchedulerReason,
    SchedulerStatus,
)

logger = logging.getLogger(__name__)
P = SchedulerStatus.PROCESSING
# Every end of an attempt clears the lease.
_LEASE_CLEARED: dict[str, Any] = {"processing_lease_expires_on": None}


def _moved(
    *,
    scheduler_id: int,
    token: int,
    from_status: str,
    to: SchedulerStatus,
    now: datetime,
    reason: str = "",
    detail: str = "",
    trace_blob_name: str = "",
    **fields: Any,
) -> bool:
    """One guarded move with its audit row (``scheduler_move``); the trace blob's name is set
    only when there is one. The ways a row ends below differ only in these arguments."""
    if trace_blob_name:
        fields["trace_blob_name"] = trace_blob_name
    moved = scheduler_move(
        scheduler_id=scheduler_id, token=token, from_status=from_status, to=to, now=now,
        reason=reason, detail=detail, **fields,
    )  # fmt: skip
    return moved is not None


def scheduler_complete(
    *,
    scheduler_id: int,
    token: int,
    coordinates: Mapping[str, Any],
    now: datetime,
    trace_blob_name: str = "",
) -> bool:
    """Processing → Completed: the delivery was queued. ``coordinates`` are small
    (docs/spec.md §4)."""
    return _moved(
        scheduler_id=scheduler_id, token=token, from_status=P, to=SchedulerStatus.COMPLETED,
        now=now, trace_blob_name=trace_blob_name, dispatch_result_json=dict(coordinates),
        next_retry_on=None, completed_on=now, **_LEASE_CLEARED,
    )  # fmt: skip


def scheduler_fail(
    *,
    scheduler_id: int,
    token: int,
    reason: SchedulerReason,
    now: datetime,
    retryable: bool = True,
    detail: str = "",
    trace_blob_name: str = "",
) -> FinishOutcome:
    """A failed attempt. Retryable: the backoff ladder, then support hold. Otherwise Failed
    with the reason (ensure may reactivate it once the cause is fixed)."""
    retry_count = (
        DueWork.objects.filter(pk=scheduler_id, status=P, version=token)
        .values_list("retry_count", flat=True)
        .first()
    )
    if retry_count is None:
        return FinishOutcome.LOST
    if retryable:
        return scheduler_retry_or_hold(
            scheduler_id=scheduler_id,
            token=token,
            retry_count=retry_count,
            reason=reason,
            now=now,
            detail=detail,
            trace_blob_name=trace_blob_name,
        )
    moved = _moved(
        scheduler_id=scheduler_id, token=token, from_status=P, to=SchedulerStatus.FAILED,
        now=now, reason=reason, detail=detail, trace_blob_name=trace_blob_name,
        failure_reason_code=reason, next_retry_on=None, **_LEASE_CLEARED,
    )  # fmt: skip
    return FinishOutcome.FAILED if moved else FinishOutcome.LOST


def scheduler_deactivate(
    *,
    scheduler_id: int,
    token: int,
    reason: SchedulerReason,
    now: datetime,
    from_status: str = P,
    detail: str = "",
    trace_blob_name: str = "",
) -> bool:
    """→ Deactivated: the source or setting is no longer valid. An outcome, not a failure.
    The executor passes its claim token; the event path passes the version it read."""
    if reason not in SCHEDULER_DEACTIVATION_REASONS:
        raise ValueError(f"{reason} is not a deactivation reason")
    return _moved(
        scheduler_id=scheduler_id, token=token, from_status=from_status,
        to=SchedulerStatus.DEACTIVATED, now=now, reason=reason, detail=detail,
        trace_blob_name=trace_blob_name, failure_reason_code=reason, **_LEASE_CLEARED,
    )  # fmt: skip


def scheduler_cancel(
    *, scheduler_id: int, token: int, from_status: str, now: datetime, detail: str = ""
) -> bool:
    """→ Cancelled (e.g. a subscription was cancelled); a claimed row loses its token."""
    return _moved(
        scheduler_id=scheduler_id, token=token, from_status=from_status,
        to=SchedulerStatus.CANCELLED, now=now, reason=SchedulerReason.CANCELLED, detail=detail,
        **_LEASE_CLEARED,
    )  # fmt: skip


def scheduler_hold(
    *,
    scheduler_id: int,
    token: int,
    from_status: str,
    reason: SchedulerReason,
    now: datetime,
    detail: str = "",
    trace_blob_name: str = "",
) -> bool:
    """→ Pending on support hold: nothing runs until a person releases it."""
    return _moved(
        scheduler_id=scheduler_id, token=token, from_status=from_status,
        to=SchedulerStatus.PENDING, now=now, reason=reason, detail=detail or "support hold",
        trace_blob_name=trace_blob_name, is_on_support_hold=True, failure_reason_code=reason,
        next_retry_on=None, **_LEASE_CLEARED,
    )  # fmt: skip


def scheduler_unclaim(
    *,
    scheduler_id: int,
    token: int,
    now: datetime,
    reason: SchedulerReason = SchedulerReason.ENQUEUE_FAILED,
) -> bool:
    """Processing → Pending without counting an attempt: the claim was never handed to a
    worker (the broker refused the task), so waiting for the lease would only add delay."""
    return _moved(
        scheduler_id=scheduler_id, token=token, from_status=P, to=SchedulerStatus.PENDING,
        now=now, reason=reason, detail="claim handed back", **_LEASE_CLEARED,
    )  # fmt: skip


def scheduler_hold_release(*, scheduler_id: int, now: datetime, detail: str = "") -> bool:
    """Support's retry: a held row becomes due now. Attempts are kept, so one more failure
    holds it again (only approved long-running handlers would retry daily)."""
    row = (
        DueWork.objects.filter(pk=scheduler_id, is_on_support_hold=True)
        .values_list("status", "version")
        .first()
    )
    if row is None or row[0] not in (SchedulerStatus.PENDING, SchedulerStatus.FAILED):
        return False
    return _moved(
        scheduler_id=scheduler_id, token=row[1], from_status=row[0], to=SchedulerStatus.PENDING,
        now=now, reason=SchedulerReason.SUPPORT_RELEASED, detail=detail,
        is_on_support_hold=False, next_retry_on=None,
    )  # fmt: skip


def scheduler_deactivate_by_key(
    *, scheduler_key: str, reason: SchedulerReason, now: datetime | None = None
) -> bool:
    """The event path's "deactivate old rows first": Pending, Processing or Failed rows only;
    Completed rows stay as history. A claimed row loses its token, so the worker's completion
    (and its handler's writes) roll back."""
    now = now or timezone.now()
    for _ in range(3):
        row = (
            DueWork.objects.filter(scheduler_key=scheduler_key)
            .values_list("pk", "status", "version")
            .first()
        )
        if row is None or row[1] not in SCHEDULER_OPEN:
            return False
        if scheduler_deactivate(
            scheduler_id=row[0], token=row[2], reason=reason, now=now, from_status=row[1]
        ):
            return True
    return False


@dataclass(frozen=True)
class StaleResult:
    released: int
    held: int
    lost: int


def scheduler_release_stale(
    *, now: datetime | None = None, limit: int | None = None
) -> StaleResult:
    """Processing rows past their lease → Pending, RetryCount + 1, on the backoff ladder (or
    support hold). Bounded; safe with two beats: each row moves by compare-and-set."""
    now = now or timezone.now()
    released = held = lost = 0
    for pk, version, retry_count in scheduler_stale(
        now=now, limit=limit or settings.SCHEDULER_STALE_BATCH
    ):
        outcome = scheduler_retry_or_hold(
            scheduler_id=pk,
            token=version,
            retry_count=retry_count,
            reason=SchedulerReason.LEASE_EXPIRED,
            now=now,
        )
        if outcome == FinishOutcome.HELD:
            held += 1
        elif outcome == FinishOutcome.RETRY_SCHEDULED:
            released += 1
        else:
            lost += 1
    if released or held:
        logger.warning("scheduler: %d stale claims released, %d put on hold", released, held)
    return StaleResult(released=released, held=held, lost=lost)
