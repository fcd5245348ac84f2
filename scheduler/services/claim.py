"""Claiming due rows (docs/spec.md §4): Pending, due, past any backoff, not held →
``Processing, lease = now + N, Version + 1 WHERE Status = Pending AND Version = read``.

PostgreSQL claims a bounded batch in one statement: the due select takes row locks with
``FOR UPDATE SKIP LOCKED`` (concurrent workers take disjoint rows without waiting) and the
update still compares each row's version with the one selected; it picks and moves in one
statement, which a move of rows already read (``common.ledger``) cannot, so it is the one
claim written here (docs/architecture.md, "State changes"). Elsewhere (SQLite) the ORM
selects candidates and the ledger compare-and-sets them in one move. Either way a row is
returned only if this claim changed it, and the returned version is the token every later
change must match.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum

from django.conf import settings
from django.db import connection

from common.ledger import Move, Step, ledger_move
from scheduler.selectors import DUE_SKIP_LOCKED_SQL, TABLE, scheduler_due_candidates
from scheduler.services.moves import DUE_WORK
from scheduler.states import SchedulerStatus


class ClaimStrategy(StrEnum):
    SKIP_LOCKED = "skip_locked"  # PostgreSQL: one statement per batch
    ROWWISE = "rowwise"  # ORM select + the ledger's compare-and-set of each row read


@dataclass(frozen=True)
class ClaimedRow:
    scheduler_id: int
    token: int  # the version this claim wrote; complete / fail / deactivate must match it
    automation_type: str
    scheduler_key: str
    lease_expires_on: datetime


_CLAIM_SQL = (
    f"WITH picked AS ({DUE_SKIP_LOCKED_SQL}) "
    f"UPDATE {TABLE} AS s SET status = '{SchedulerStatus.PROCESSING.value}', "
    "processing_lease_expires_on = %(lease)s, version = s.version + 1, updated_on = %(now)s "
    "FROM picked WHERE s.id = picked.id AND s.version = picked.version "
    f"AND s.status = '{SchedulerStatus.PENDING.value}' "
    "RETURNING s.id, s.version, s.automation_type, s.scheduler_key"
)


def scheduler_claim_due(
    *,
    now: datetime,
    limit: int | None = None,
    lease_s: float | None = None,
    strategy: ClaimStrategy | None = None,
) -> list[ClaimedRow]:
    """Claim up to ``limit`` due rows for this worker, in due order."""
    limit = limit or settings.SCHEDULER_CLAIM_BATCH
    lease = now + timedelta(seconds=lease_s if lease_s is not None else settings.SCHEDULER_LEASE_S)
    if strategy is None:
        strategy = (
            ClaimStrategy.SKIP_LOCKED
            if connection.vendor == "postgresql"
            else ClaimStrategy.ROWWISE
        )
    if strategy == ClaimStrategy.SKIP_LOCKED:
        return _claim_skip_locked(now, limit, lease)
    return _claim_rowwise(now, limit, lease)


def _claim_skip_locked(now: datetime, limit: int, lease: datetime) -> list[ClaimedRow]:
    """One statement, atomic on its own: no BEGIN/COMMIT round trips around it."""
    with connection.cursor() as cursor:
        cursor.execute(_CLAIM_SQL, {"now": now, "limit": limit, "lease": lease})
        rows = cursor.fetchall()
    return sorted(
        (ClaimedRow(pk, version, kind, key, lease) for pk, version, kind, key in rows),
        key=lambda r: r.scheduler_id,
    )


def _claim_rowwise(now: datetime, limit: int, lease: datetime) -> list[ClaimedRow]:
    """The candidates read, then claimed by one move of the ledger, each row on the version
    read: version alone proves nothing changed since the read (a hold bumps it too), so no
    hold predicate, and the lookup stays on the primary key. A claim writes no audit row:
    the end of its attempt does (with the attempt's token)."""
    candidates = scheduler_due_candidates(now=now, limit=limit)
    claim = Step(SchedulerStatus.PROCESSING, audit=None)
    sets = {"processing_lease_expires_on": lease}
    moves = [
        Move(pk, SchedulerStatus.PENDING, version, [claim], sets)
        for pk, version, _, _ in candidates
    ]
    moved = ledger_move(DUE_WORK, moves, now=now)
    return [
        ClaimedRow(pk, version + 1, kind, key, lease)
        for pk, version, kind, key in candidates
        if pk in moved  # this claim changed the row: it owns it
    ]
