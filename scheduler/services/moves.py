"""The one way a scheduler row changes: a compare-and-set on (status, version) that writes its
audit row in the same transaction. Zero rows changed means someone else moved it first (a
newer claim, stale cleanup, the event path): the caller returns, nothing is written."""

from __future__ import annotations

from datetime import date, datetime, timedelta
from typing import TypedDict, Unpack

from django.conf import settings
from django.db import connection, transaction
from django.db.models import F, Field

from common.json_types import JsonObject
from scheduler.models import DueWork, DueWorkTransition
from scheduler.states import SchedulerStatus, scheduler_can_move

TABLE = DueWork._meta.db_table
_AUDIT_INSERT = (
    f"INSERT INTO {DueWorkTransition._meta.db_table} "
    "(scheduler_id, from_status, to_status, reason_code, version, retry_count, detail, at) "
    "SELECT id, %s, status, %s, version, retry_count, %s, %s "
)
_AUDIT_SQL = f"{_AUDIT_INSERT} FROM {TABLE} WHERE id = %s"


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
    row was not there any more (then nothing was written)."""
    if not scheduler_can_move(from_status, to):
        return None
    if connection.vendor == "postgresql":
        where: list[int | str] = [scheduler_id, from_status, token]
        audit: list[str | datetime] = [from_status, reason, detail[:500], now]
        return token + 1 if _move_one_statement(to, now, fields, where, audit) else None
    with transaction.atomic():
        count = DueWork.objects.filter(pk=scheduler_id, status=from_status, version=token).update(
            status=to, version=F("version") + 1, updated_on=now, **fields
        )
        if count != 1:
            return None
        scheduler_audit(
            scheduler_id=scheduler_id, from_status=from_status, reason=reason, detail=detail, at=now
        )
    return token + 1


def _move_one_statement(
    to: str,
    now: datetime,
    fields: DueWorkFields,
    where: list[int | str],
    audit: list[str | datetime],
) -> bool:
    """PostgreSQL: the guarded update (``where``: id, status, version) and its audit row
    (``audit``: from status, reason, detail, at) in one statement (a data-modifying CTE),
    atomic on its own: one round trip, no transaction or savepoint of its own. A per-row
    finish costs about a bare UPDATE (see ``manage.py bench_scheduler``)."""
    qn = connection.ops.quote_name
    sets = ["status = %s", "version = version + 1", "updated_on = %s"]
    values = []
    for name, value in fields.items():
        field = DueWork._meta.get_field(name)
        if not isinstance(field, Field) or field.column is None:
            raise TypeError(f"{name} is not a column of {TABLE}")
        sets.append(f"{qn(field.column)} = %s")
        values.append(field.get_db_prep_save(value, connection))
    sql = (
        f"WITH moved AS (UPDATE {TABLE} SET {', '.join(sets)} "
        "WHERE id = %s AND status = %s AND version = %s "
        "RETURNING id, status, version, retry_count) "
        f"{_AUDIT_INSERT} FROM moved RETURNING scheduler_id"
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, [to, now, *values, *where, *audit])
        return cursor.fetchone() is not None


def scheduler_audit(
    *, scheduler_id: int, from_status: str, reason: str, detail: str, at: datetime
) -> None:
    """The transition row, copied from the row just written (to status, version, attempts)."""
    with connection.cursor() as cursor:
        cursor.execute(_AUDIT_SQL, [from_status, reason, detail[:500], at, scheduler_id])


def scheduler_backoff(retry_count: int) -> timedelta | None:
    """The wait before retry ``retry_count`` (1-based): 5 min, 15 min, 1 h by default; None
    past the ladder, meaning the row goes on support hold."""
    ladder = settings.SCHEDULER_BACKOFF_MINUTES
    if retry_count < 1 or retry_count > len(ladder):
        return None
    return timedelta(minutes=ladder[retry_count - 1])
