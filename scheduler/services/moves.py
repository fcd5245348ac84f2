"""The one way a scheduler row changes: a move of the due-work ledger (``common.ledger``), a
compare-and-set on (status, version) with its audit row in the same statement. Zero rows
changed means someone else moved it first (a newer claim, stale cleanup, the event path): the
caller returns, nothing is written."""

from __future__ import annotations

from datetime import date, datetime, timedelta
from typing import TypedDict, Unpack

from django.conf import settings

from common.json_types import JsonObject
from common.ledger import Ledger, Move, Step, ledger_move
from scheduler.models import DueWork, DueWorkTransition
from scheduler.states import SCHEDULER_TRANSITIONS, SchedulerStatus

# Due work's ledger: its version and ``updated_on`` follow every move, and each audit row
# copies the version and the attempts the move left on the row.
DUE_WORK = Ledger(
    DueWork,
    touched="updated_on",
    audit=DueWorkTransition,
    audit_row="scheduler",
    copies={"version": "version", "retry_count": "retry_count"},
    edges=SCHEDULER_TRANSITIONS,
)
DETAIL_MAX_CHARS = 500


class DueWorkFields(TypedDict, total=False):
    """The columns a move sets beside status, version and ``updated_on``: the one list of
    them, so a typo or a value of the wrong type is a type error, not a silent extra column."""

    completed_on: datetime
    dispatch_result_json: JsonObject
    failure_reason_code: str
    farm_id: int
    input_hash: str
    is_on_support_hold: bool
    next_retry_on: datetime | None
    processing_lease_expires_on: datetime | None
    retry_count: int
    scheduled_local_date: date | None
    scheduled_on: datetime
    scheduler_key: str
    time_zone_id: str
    trace_blob_name: str
    trigger_type: str


def scheduler_move(
    *,
    scheduler_id: int,
    token: int,
    from_status: str,
    to: SchedulerStatus,
    now: datetime,
    reason: str = "",
    detail: str = "",
    **fields: Unpack[DueWorkFields],
) -> int | None:
    """Move the row from ``from_status`` at version ``token``; the new version, or None if the
    row was not there any more (then nothing was written). On PostgreSQL the update and its
    audit row are one statement: a per-row finish costs about a bare UPDATE (see
    ``manage.py bench_scheduler``)."""
    move = scheduler_moving(scheduler_id, token, from_status, to, reason, detail, fields)
    return token + 1 if ledger_move(DUE_WORK, [move], now=now) else None


def scheduler_moving(
    scheduler_id: int,
    token: int,
    from_status: str,
    to: str,
    reason: str,
    detail: str,
    fields: DueWorkFields,
) -> Move:
    """A row's move as the ledger takes it, alone or in a batch (``services.batch``)."""
    step = Step(to, {"reason_code": reason, "detail": detail[:DETAIL_MAX_CHARS]})
    return Move(scheduler_id, from_status, token, [step], fields)


def scheduler_backoff(retry_count: int) -> timedelta | None:
    """The wait before retry ``retry_count`` (1-based): 5 min, 15 min, 1 h by default; None
    past the ladder, meaning the row goes on support hold."""
    ladder = settings.SCHEDULER_BACKOFF_MINUTES
    if retry_count < 1 or retry_count > len(ladder):
        return None
    return timedelta(minutes=ladder[retry_count - 1])
