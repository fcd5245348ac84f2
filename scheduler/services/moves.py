"""The one way a scheduler row changes: a compare-and-set on (status, version) that writes its
audit row in the same transaction. Zero rows changed means someone else moved it first (a
newer claim, stale cleanup, the event path): the caller returns, nothing is written."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import connection, transaction
from django.db.models import F

from scheduler.models import DueWork, DueWorkTransition
from scheduler.states import (
    FinishOutcome,
    SchedulerReason,
    SchedulerStatus,
    scheduler_can_move,
)

TABLE = DueWork._meta.db_table
_AUDIT_INSERT = (
    f"INSERT INTO {DueWorkTransition._meta.db_table} "
    "(scheduler_id, from_status, to_status, reason_code, version, retry_count, detail, at) "
    "SELECT id, %s, status, %s, version, retry_count, %s, %s "
)
_AUDIT_SQL = f"{_AUDIT_INSERT} FROM {TABLE} WHERE id = %s"


def scheduler_move(
    *,
    scheduler_id: int,
    token: int,
    from_status: str,
    to: SchedulerStatus,
    now: datetime,
    reason: str = "",
    detail: str = "",
    **fields: Any,
) -> int | None:
    """Move the row from ``from_status`` at version ``token``; the new version, or None if the
    row was not there any more (then nothing was written)."""
    if not scheduler_can_move(from_status, to):
        return None
    if connection.vendor == "postgresql":
        moved = _move_one_statement(
            scheduler_id, token, from_status, to, now, reason, detail, fields
        )
        return token + 1 if moved else None
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
    scheduler_id: int,
    token: int,
    from_status: str,
    to: str,
    now: datetime,
    reason: str,
    detail: str,
    fields: dict[str, Any],
) -> bool:
    """PostgreSQL: the guarded update and its audit row in one statement (a data-modifying
    CTE), atomic on its own: one round trip, no transaction or savepoint of its own. A per-row
    finish costs about a bare UPDATE (see ``manage.py bench_scheduler``)."""
    qn = connection.ops.quote_name
    sets = ["status = %s", "version = version + 1", "updated_on = %s"]
    params: list[Any] = [to, now]
    for name, value in fields.items():
        field: Any = DueWork._meta.get_field(name)
        sets.append(f"{qn(field.column)} = %s")
        params.append(field.get_db_prep_save(value, connection))
    sql = (
        f"WITH moved AS (UPDATE {TABLE} SET {', '.join(sets)} "
        "WHERE id = %s AND status = %s AND version = %s "
        "RETURNING id, status, version, retry_count) "
        f"{_AUDIT_INSERT} FROM moved RETURNING scheduler_id"
    )
    params += [scheduler_id, from_status, token, from_status, reason, detail[:500], now]
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
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


def retry_fields(*, retry_count: int, reason: str, now: datetime) -> dict[str, Any]:
    """Back to Pending with the next retry time, or on support hold past the ladder."""
    wait = scheduler_backoff(retry_count)
    fields: dict[str, Any] = {
        "retry_count": retry_count,
        "failure_reason_code": reason,
        "processing_lease_expires_on": None,
        "next_retry_on": None if wait is None else now + wait,
    }
    if wait is None:
        fields["is_on_support_hold"] = True
    return fields


def scheduler_retry_or_hold(
    *,
    scheduler_id: int,
    token: int,
    retry_count: int,
    reason: SchedulerReason,
    now: datetime,
    detail: str = "",
    trace_blob_name: str = "",
) -> FinishOutcome:
    """A Processing row whose attempt failed (or whose lease expired): RetryCount + 1 and
    Pending on the backoff ladder, or on support hold after the last step."""
    attempts = retry_count + 1
    fields = retry_fields(retry_count=attempts, reason=reason, now=now)
    if trace_blob_name:
        fields["trace_blob_name"] = trace_blob_name
    held = fields.get("is_on_support_hold", False)
    note = f"attempt {attempts} failed" + (": support hold" if held else "")
    moved = scheduler_move(
        scheduler_id=scheduler_id,
        token=token,
        from_status=SchedulerStatus.PROCESSING,
        to=SchedulerStatus.PENDING,
        now=now,
        reason=reason,
        detail=f"{note}; {detail}" if detail else note,
        **fields,
    )
    if moved is None:
        return FinishOutcome.LOST
    return FinishOutcome.HELD if held else FinishOutcome.RETRY_SCHEDULED
