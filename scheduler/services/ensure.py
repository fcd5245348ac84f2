"""``scheduler_ensure``: the only way due work is created or rescheduled (the ensure table
of docs/spec.md §4).

| existing row                                  | result                                     |
|-----------------------------------------------|--------------------------------------------|
| none                                          | INSERTED                                   |
| Pending, same input                           | UPDATED (schedule moved) or UNCHANGED      |
| Failed / Deactivated / Cancelled, same input  | REACTIVATED: Pending, attempts and         |
|                                               | diagnostics kept                           |
| Completed                                     | ALREADY_COMPLETED with its coordinates     |
|                                               | (CONFLICT if the input differs); never sent|
|                                               | again                                      |
| Processing, same input                        | IN_PROGRESS, untouched                     |
| any other, different InputHash                | CONFLICT: support hold, input never        |
|                                               | overwritten                                |

A support hold is never cleared here: releasing it is support's decision.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date, datetime
from enum import StrEnum
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from django.db import transaction
from django.utils import timezone

from common.json_types import JsonObject
from common.ledger import Step, ledger_created
from common.sql import insert_ignore_returning
from scheduler.keys import SchedulerKeySpec, scheduler_key
from scheduler.models import DueWork
from scheduler.services.moves import DUE_WORK, DueWorkFields, scheduler_move
from scheduler.states import SCHEDULER_ENSURE_COMPATIBLE, SchedulerReason, SchedulerStatus

S = SchedulerStatus
MAX_RACES = 5


class EnsureOutcome(StrEnum):
    INSERTED = "inserted"
    UPDATED = "updated"
    UNCHANGED = "unchanged"
    REACTIVATED = "reactivated"
    ALREADY_COMPLETED = "already_completed"
    IN_PROGRESS = "in_progress"
    CONFLICT = "conflict"


@dataclass(frozen=True)
class EnsureResult:
    """Which line of the ensure table applied, and the row's coordinates afterwards."""

    outcome: EnsureOutcome
    scheduler_id: int
    scheduler_key: str
    status: str
    version: int
    is_on_support_hold: bool
    dispatch_result: JsonObject | None


@dataclass(frozen=True)
class _Wanted:
    key: str
    automation_type: str
    trigger_type: str
    scheduled_on: datetime
    scheduled_local_date: date | None
    time_zone_id: str
    input_hash: str
    farm_id: int | None

    def schedule(self) -> DueWorkFields:
        return {
            "scheduled_on": self.scheduled_on,
            "scheduled_local_date": self.scheduled_local_date,
            "time_zone_id": self.time_zone_id,
        }


def scheduler_ensure(
    *,
    key: SchedulerKeySpec,
    scheduled_on: datetime,
    input_hash: str,
    time_zone_id: str = "UTC",
    scheduled_local_date: date | None = None,
    trigger_type: str | None = None,
    farm_id: int | None = None,
    now: datetime | None = None,
) -> EnsureResult:
    """Make the row for ``key`` exist and be due at ``scheduled_on`` — or say why not.

    Safe under concurrency: the insert absorbs a duplicate key, and every update is a
    compare-and-set that re-reads and re-decides when it loses. ``farm_id`` (when the caller
    knows it) scopes the row to the farm's organisation; a row without one gets it on its next
    rescheduling or reactivation, and a farm once set is never changed here.
    """
    now = now or timezone.now()
    wanted = _wanted(
        key, scheduled_on, input_hash, time_zone_id, scheduled_local_date, trigger_type, farm_id
    )
    for _ in range(MAX_RACES):
        row = DueWork.objects.filter(scheduler_key=wanted.key).first()
        result = _insert(wanted, now) if row is None else _apply(row, wanted, now)
        if result is not None:
            return result
    raise RuntimeError(f"scheduler_ensure kept losing races on {wanted.key}")


def _wanted(
    key: SchedulerKeySpec,
    scheduled_on: datetime,
    input_hash: str,
    time_zone_id: str,
    scheduled_local_date: date | None,
    trigger_type: str | None,
    farm_id: int | None,
) -> _Wanted:
    if timezone.is_naive(scheduled_on):
        raise ValueError("scheduled_on must be timezone-aware (UTC)")
    trigger = trigger_type or key.trigger_types[0]
    if trigger not in key.trigger_types:
        raise ValueError(f"trigger type {trigger!r} does not fit a {type(key).__name__}")
    try:
        ZoneInfo(time_zone_id)
    except (ZoneInfoNotFoundError, ValueError):
        raise ValueError(f"unknown time zone {time_zone_id!r}") from None
    if len(input_hash) != 64:
        raise ValueError("input_hash must be a sha256 hex digest (scheduler_input_hash)")
    return _Wanted(
        key=scheduler_key(key),
        automation_type=key.automation_type,
        trigger_type=trigger,
        scheduled_on=scheduled_on,
        scheduled_local_date=scheduled_local_date,
        time_zone_id=time_zone_id,
        input_hash=input_hash,
        farm_id=farm_id,
    )


def _insert(wanted: _Wanted, now: datetime) -> EnsureResult | None:
    values = {
        "automation_type": wanted.automation_type,
        "trigger_type": wanted.trigger_type,
        "farm": wanted.farm_id,
        "scheduler_key": wanted.key,
        **wanted.schedule(),
        "status": S.PENDING,
        "input_hash": wanted.input_hash,
        "created_on": now,
        "updated_on": now,
    }
    with transaction.atomic():
        inserted = insert_ignore_returning(DueWork, [values])
        if not inserted:
            return None  # someone else inserted it: re-read and decide
        pk = int(inserted[0][0])
        audit = {"detail": "ensured", "version": 0, "retry_count": 0}
        ledger_created(DUE_WORK, [(pk, Step(S.PENDING, audit))], now=now)
    return EnsureResult(EnsureOutcome.INSERTED, pk, wanted.key, S.PENDING, 0, False, None)


def _apply(row: DueWork, wanted: _Wanted, now: datetime) -> EnsureResult | None:
    compatible = (
        row.input_hash == wanted.input_hash
        and row.automation_type == wanted.automation_type
        and row.trigger_type == wanted.trigger_type
    )
    if row.status == S.COMPLETED:
        outcome = EnsureOutcome.ALREADY_COMPLETED if compatible else EnsureOutcome.CONFLICT
        return _result(outcome, row)
    if not compatible:
        return _conflict(row, wanted, now)
    if row.status == S.PROCESSING:
        return _result(EnsureOutcome.IN_PROGRESS, row)
    if row.status not in SCHEDULER_ENSURE_COMPATIBLE:
        raise RuntimeError(f"unknown scheduler status {row.status!r}")
    schedule = wanted.schedule()
    fields: DueWorkFields = {**schedule, **_farm_fill(row, wanted)}
    if row.status == S.PENDING:
        if all(getattr(row, name) == value for name, value in schedule.items()):
            return _result(EnsureOutcome.UNCHANGED, row)
        return _move(row, S.PENDING, EnsureOutcome.UPDATED, now, "rescheduled", fields)
    fields["processing_lease_expires_on"] = None
    return _move(row, S.PENDING, EnsureOutcome.REACTIVATED, now, "reactivated", fields)


def _farm_fill(row: DueWork, wanted: _Wanted) -> DueWorkFields:
    """Rows ensured before they carried a farm get it with their next write."""
    if row.farm_id is None and wanted.farm_id is not None:
        return {"farm_id": wanted.farm_id}
    return {}


def _conflict(row: DueWork, wanted: _Wanted, now: datetime) -> EnsureResult | None:
    """Same key, different input: hold for support (a claimed row loses its claim), keeping
    the stored input. Already held for this reason: nothing to write."""
    if (
        row.status == S.PENDING
        and row.is_on_support_hold
        and row.failure_reason_code == SchedulerReason.INPUT_HASH_CONFLICT
    ):
        return _result(EnsureOutcome.CONFLICT, row)
    detail = (
        f"ensure wanted input {wanted.input_hash[:16]} ({wanted.automation_type}/"
        f"{wanted.trigger_type}); row has {row.input_hash[:16]}"
    )
    fields: DueWorkFields = {
        "is_on_support_hold": True,
        "failure_reason_code": SchedulerReason.INPUT_HASH_CONFLICT,
        "processing_lease_expires_on": None,
        "next_retry_on": None,
    }
    return _move(
        row,
        S.PENDING,
        EnsureOutcome.CONFLICT,
        now,
        detail,
        fields,
        reason=SchedulerReason.INPUT_HASH_CONFLICT,
    )


def _move(
    row: DueWork,
    to: SchedulerStatus,
    outcome: EnsureOutcome,
    now: datetime,
    detail: str,
    fields: DueWorkFields,
    reason: str = "",
) -> EnsureResult | None:
    version = scheduler_move(
        scheduler_id=row.pk,
        token=row.version,
        from_status=row.status,
        to=to,
        now=now,
        reason=reason,
        detail=detail,
        **fields,
    )
    if version is None:
        return None  # lost a race: re-read and decide again
    for name, value in fields.items():
        setattr(row, name, value)
    row.status, row.version = to, version
    return _result(outcome, row)


def _result(outcome: EnsureOutcome, row: DueWork) -> EnsureResult:
    return EnsureResult(
        outcome=outcome,
        scheduler_id=row.pk,
        scheduler_key=row.scheduler_key,
        status=row.status,
        version=row.version,
        is_on_support_hold=row.is_on_support_hold,
        dispatch_result=row.dispatch_result_json,
    )
