"""Ending an attempt (complete, fail, deactivate, hold, unclaim, retry), the event path's
deactivate and cancel, support's hold release, and stale-lease cleanup. Every change is
``WHERE version = token``: a worker whose lease expired cannot overwrite a newer claim.

Each way a row ends is one ``Ending`` below (where it goes, the columns that sets); the public
functions only pick one and pass the caller's row, reason and detail to ``_end``."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import NotRequired, TypedDict, Unpack

from django.conf import settings
from django.utils import timezone

from common.json_types import JsonValue
from scheduler.models import DueWork
from scheduler.selectors import scheduler_stale
from scheduler.services.moves import DueWorkFields, scheduler_backoff, scheduler_move
from scheduler.states import (
    SCHEDULER_DEACTIVATION_REASONS,
    SCHEDULER_OPEN,
    FinishOutcome,
    SchedulerReason,
    SchedulerStatus,
)

logger = logging.getLogger(__name__)
S = SchedulerStatus
P = S.PROCESSING


class RowEnd(TypedDict):
    """Which row ends and when: its id, the version it is moved from (the claim's token, or
    the version the event path read), the audit row's detail and the trace blob's name."""

    scheduler_id: int
    token: int
    now: datetime
    detail: NotRequired[str]
    trace_blob_name: NotRequired[str]


@dataclass(frozen=True)
class Ending:
    """One way a row ends: its new status, the columns that sets beside it, whether the
    move's reason is kept as ``failure_reason_code``, and the audit detail when none is given."""

    to: SchedulerStatus
    sets: DueWorkFields
    keeps_reason: bool = False
    detail: str = ""

    def columns(self, reason: str, blob: str, extra: DueWorkFields) -> DueWorkFields:
        """What this end writes beside the status: its own columns, the caller's, the reason
        where it keeps one and the trace blob's name where there is one."""
        fields: DueWorkFields = {**self.sets, **extra}
        if self.keeps_reason:
            fields["failure_reason_code"] = reason
        else:
            fields.pop("failure_reason_code", None)
        if blob:
            fields["trace_blob_name"] = blob
        return fields


# Every end of an attempt clears the lease; only support's release leaves it (none is held).
COMPLETE = Ending(S.COMPLETED, {"next_retry_on": None, "processing_lease_expires_on": None})
FAIL = Ending(
    S.FAILED, {"next_retry_on": None, "processing_lease_expires_on": None}, keeps_reason=True
)
RETRY = Ending(S.PENDING, {"processing_lease_expires_on": None}, keeps_reason=True)
HOLD = Ending(
    S.PENDING,
    {"is_on_support_hold": True, "next_retry_on": None, "processing_lease_expires_on": None},
    keeps_reason=True,
    detail="support hold",
)
DEACTIVATE = Ending(S.DEACTIVATED, {"processing_lease_expires_on": None}, keeps_reason=True)
CANCEL = Ending(S.CANCELLED, {"processing_lease_expires_on": None})
UNCLAIM = Ending(S.PENDING, {"processing_lease_expires_on": None}, detail="claim handed back")
RELEASE = Ending(S.PENDING, {"is_on_support_hold": False, "next_retry_on": None})


def _end(
    ending: Ending, from_status: str, reason: str, row: RowEnd, **extra: Unpack[DueWorkFields]
) -> bool:
    """One guarded move with its audit row (``scheduler_move``) along ``ending``; the trace
    blob's name is set only when there is one. False: someone else moved the row first."""
    fields = ending.columns(reason, row.get("trace_blob_name", ""), extra)
    moved = scheduler_move(
        scheduler_id=row["scheduler_id"], token=row["token"], from_status=from_status,
        to=ending.to, now=row["now"], reason=reason,
        detail=row.get("detail") or ending.detail, **fields,
    )  # fmt: skip
    return moved is not None


def scheduler_complete(*, coordinates: Mapping[str, JsonValue], **row: Unpack[RowEnd]) -> bool:
    """Processing → Completed: the delivery was queued. ``coordinates`` are small
    (docs/spec.md §4)."""
    now = row["now"]
    return _end(COMPLETE, P, "", row, dispatch_result_json=dict(coordinates), completed_on=now)


def scheduler_fail(
    *, reason: SchedulerReason, retryable: bool = True, **row: Unpack[RowEnd]
) -> FinishOutcome:
    """A failed attempt. Retryable: the backoff ladder, then support hold. Otherwise Failed
    with the reason (ensure may reactivate it once the cause is fixed)."""
    retry_count = (
        DueWork.objects.filter(pk=row["scheduler_id"], status=P, version=row["token"])
        .values_list("retry_count", flat=True)
        .first()
    )
    if retry_count is None:
        return FinishOutcome.LOST
    if retryable:
        return scheduler_retry_or_hold(retry_count=retry_count, reason=reason, **row)
    return FinishOutcome.FAILED if _end(FAIL, P, reason, row) else FinishOutcome.LOST


def scheduler_retry_or_hold(
    *, retry_count: int, reason: SchedulerReason, **row: Unpack[RowEnd]
) -> FinishOutcome:
    """A Processing row whose attempt failed (or whose lease expired): RetryCount + 1 and
    Pending on the backoff ladder, or on support hold after the last step."""
    attempts = retry_count + 1
    wait = scheduler_backoff(attempts)
    note = f"attempt {attempts} failed" + (": support hold" if wait is None else "")
    detail = row.get("detail")
    row["detail"] = f"{note}; {detail}" if detail else note
    if wait is None:
        held = _end(HOLD, P, reason, row, retry_count=attempts)
        return FinishOutcome.HELD if held else FinishOutcome.LOST
    due = row["now"] + wait
    moved = _end(RETRY, P, reason, row, retry_count=attempts, next_retry_on=due)
    return FinishOutcome.RETRY_SCHEDULED if moved else FinishOutcome.LOST


def scheduler_deactivate(
    *, reason: SchedulerReason, from_status: str = P, **row: Unpack[RowEnd]
) -> bool:
    """→ Deactivated: the source or setting is no longer valid. An outcome, not a failure.
    The executor passes its claim token; the event path passes the version it read."""
    if reason not in SCHEDULER_DEACTIVATION_REASONS:
        raise ValueError(f"{reason} is not a deactivation reason")
    return _end(DEACTIVATE, from_status, reason, row)


def scheduler_cancel(
    *, scheduler_id: int, token: int, from_status: str, now: datetime, detail: str = ""
) -> bool:
    """→ Cancelled (e.g. a subscription was cancelled); a claimed row loses its token."""
    row = RowEnd(scheduler_id=scheduler_id, token=token, now=now, detail=detail)
    return _end(CANCEL, from_status, SchedulerReason.CANCELLED, row)


def scheduler_hold(*, from_status: str, reason: SchedulerReason, **row: Unpack[RowEnd]) -> bool:
    """→ Pending on support hold: nothing runs until a person releases it."""
    return _end(HOLD, from_status, reason, row)


def scheduler_unclaim(
    *,
    scheduler_id: int,
    token: int,
    now: datetime,
    reason: SchedulerReason = SchedulerReason.ENQUEUE_FAILED,
) -> bool:
    """Processing → Pending without counting an attempt: the claim was never handed to a
    worker (the broker refused the task), so waiting for the lease would only add delay."""
    return _end(UNCLAIM, P, reason, RowEnd(scheduler_id=scheduler_id, token=token, now=now))


def scheduler_hold_release(*, scheduler_id: int, now: datetime, detail: str = "") -> bool:
    """Support's retry: a held row becomes due now. Attempts are kept, so one more failure
    holds it again (only approved long-running handlers would retry daily)."""
    found = (
        DueWork.objects.filter(pk=scheduler_id, is_on_support_hold=True)
        .values_list("status", "version")
        .first()
    )
    if found is None or found[0] not in (S.PENDING, S.FAILED):
        return False
    status, version = found
    row = RowEnd(scheduler_id=scheduler_id, token=version, now=now, detail=detail)
    return _end(RELEASE, status, SchedulerReason.SUPPORT_RELEASED, row)


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
