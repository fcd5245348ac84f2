"""Reads of the due-work table. The due predicate is written once here (ORM and SQL) and
matches the partial index ``scheduler_due_idx`` (Pending, not held), so the due query is an
index scan however much history the table holds."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from django.db import connection
from django.db.models import Count, Q, QuerySet

from common.hot_sql import hot_rows
from scheduler.models import DueWork
from scheduler.registry import SchedulerJob
from scheduler.states import SchedulerStatus

TABLE = DueWork._meta.db_table
# Literals, not parameters, so the planner can match the partial index predicate.
DUE_WHERE_SQL = (
    f"status = '{SchedulerStatus.PENDING.value}' AND NOT is_on_support_hold "
    "AND scheduled_on <= %(now)s AND (next_retry_on IS NULL OR next_retry_on <= %(now)s)"
)
# The claim's inner select (PostgreSQL): due rows in due order, skipping rows another
# transaction holds, so concurrent workers take disjoint batches without waiting.
DUE_SKIP_LOCKED_SQL = (
    f"SELECT id, version FROM {TABLE} WHERE {DUE_WHERE_SQL} "
    "ORDER BY scheduled_on LIMIT %(limit)s FOR UPDATE SKIP LOCKED"
)

_JOB_COLUMNS = (
    "automation_type",
    "trigger_type",
    "scheduler_key",
    "scheduled_on",
    "scheduled_local_date",
    "time_zone_id",
    "input_hash",
    "retry_count",
)
_JOB_SQL = (
    f"SELECT {', '.join(_JOB_COLUMNS)} FROM {TABLE} "
    f"WHERE id = %s AND status = '{SchedulerStatus.PROCESSING.value}' AND version = %s"
)


def scheduler_claimed_job(*, scheduler_id: int, token: int, now: datetime) -> SchedulerJob | None:
    """What the claim ``token`` owns, or None if the row moved on. Every executed row reads
    this, so PostgreSQL gets one plain SELECT (a third of the ORM's cost, measured); other
    databases go through the ORM, which converts their column types."""
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute(_JOB_SQL, [scheduler_id, token])
            row = cursor.fetchone()
    else:
        row = (
            DueWork.objects.filter(
                pk=scheduler_id, status=SchedulerStatus.PROCESSING, version=token
            )
            .values_list(*_JOB_COLUMNS)
            .first()
        )
    if row is None:
        return None
    fields: dict[str, Any] = dict(zip(_JOB_COLUMNS, row, strict=True))
    return SchedulerJob(scheduler_id=scheduler_id, token=token, now=now, **fields)


_JOBS_SQL = (
    f"SELECT id, version, {', '.join(_JOB_COLUMNS)} FROM {TABLE} "
    f"WHERE id = ANY(%s) AND status = '{SchedulerStatus.PROCESSING.value}'"
)


def scheduler_claimed_jobs(
    *, claims: Sequence[tuple[int, int]], now: datetime
) -> list[SchedulerJob]:
    """What each claim (id, token) still owns, in the claims' order, in one read; a row that
    moved on is left out. One statement on PostgreSQL whatever the number of claims (an
    array parameter, so one prepared plan serves every batch size)."""
    tokens = dict(claims)
    if not tokens:
        return []
    if connection.vendor == "postgresql":
        found = hot_rows(_JOBS_SQL, [list(tokens)])
    else:
        found = list(
            DueWork.objects.filter(
                pk__in=list(tokens), status=SchedulerStatus.PROCESSING
            ).values_list("pk", "version", *_JOB_COLUMNS)
        )
    jobs: dict[int, SchedulerJob] = {}
    for pk, version, *values in found:
        if tokens.get(pk) == version:
            fields: dict[str, Any] = dict(zip(_JOB_COLUMNS, values, strict=True))
            jobs[pk] = SchedulerJob(scheduler_id=pk, token=version, now=now, **fields)
    return [jobs[pk] for pk in tokens if pk in jobs]


def scheduler_due(*, now: datetime) -> QuerySet[DueWork]:
    """Pending, not held, scheduled and past any retry backoff."""
    return DueWork.objects.filter(
        Q(next_retry_on__isnull=True) | Q(next_retry_on__lte=now),
        status=SchedulerStatus.PENDING,
        is_on_support_hold=False,
        scheduled_on__lte=now,
    )


def scheduler_due_candidates(*, now: datetime, limit: int) -> list[tuple[int, int, str, str]]:
    """(id, version, automation_type, scheduler_key) of due rows in due order, bounded."""
    rows = (
        scheduler_due(now=now)
        .order_by("scheduled_on")
        .values_list("pk", "version", "automation_type", "scheduler_key")[:limit]
    )
    return list(rows)


def scheduler_stale(*, now: datetime, limit: int) -> list[tuple[int, int, int]]:
    """(id, version, retry_count) of Processing rows whose lease has expired, bounded."""
    rows = (
        DueWork.objects.filter(
            status=SchedulerStatus.PROCESSING, processing_lease_expires_on__lte=now
        )
        .order_by("processing_lease_expires_on")
        .values_list("pk", "version", "retry_count")[:limit]
    )
    return list(rows)


def scheduler_get_by_key(scheduler_key: str) -> DueWork | None:
    return DueWork.objects.filter(scheduler_key=scheduler_key).first()


def scheduler_held(*, limit: int = 100) -> QuerySet[DueWork]:
    """Rows waiting for support, oldest change first."""
    return DueWork.objects.filter(is_on_support_hold=True).order_by("updated_on")[:limit]


def scheduler_backlog() -> dict[str, int]:
    """Row counts per status, plus ``held``: the backlog metric of the scheduler stage."""
    counts: dict[str, int] = {s: 0 for s in SchedulerStatus.values}
    for row in DueWork.objects.values("status").annotate(n=Count("id")):
        counts[row["status"]] = row["n"]
    counts["held"] = DueWork.objects.filter(is_on_support_hold=True).count()
    return counts


def scheduler_due_explain(*, now: datetime, limit: int, analyze: bool = False) -> str:
    """PostgreSQL's plan of the claim's due select: shows the partial index scan."""
    if connection.vendor != "postgresql":
        raise RuntimeError("EXPLAIN of the SKIP LOCKED claim needs PostgreSQL")
    params: dict[str, Any] = {"now": now, "limit": limit}
    prefix = "EXPLAIN (ANALYZE, BUFFERS, COSTS OFF)" if analyze else "EXPLAIN (COSTS OFF)"
    with connection.cursor() as cursor:
        cursor.execute(f"{prefix} {DUE_SKIP_LOCKED_SQL}", params)
        return "\n".join(row[0] for row in cursor.fetchall())
