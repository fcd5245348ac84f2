"""The rollout bench's floors: the wave's own rows written and claimed with nothing but SQL,
in twins of the product's tables (same columns and indexes, no foreign keys on PostgreSQL),
in the same batches as the driver's waves, so a ratio reads as "the driver's cost over what
the database must do anyway"."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from django.db import connection, transaction

from automation.models import DeviceCommand
from devtools.bench import BenchError
from rollouts.models import RolloutTarget

COMMANDS = DeviceCommand._meta.db_table
TARGETS = RolloutTarget._meta.db_table
BARE_COMMANDS = "bench_bare_rollout_command"
BARE_TARGETS = "bench_bare_rollout_target"
MAX_PARAMS = 30_000  # per statement: under SQLite's bound-parameter limit (and PostgreSQL's)
BARE_CLAIM_SQL = (
    f"UPDATE {BARE_TARGETS} SET step = 'sent' WHERE id IN (SELECT id FROM {BARE_TARGETS} "
    "WHERE rollout_id = %s AND step = 'pending' ORDER BY id LIMIT %s FOR UPDATE SKIP LOCKED) "
    "RETURNING id, endpoint_id"
)


def claim_unavailable() -> str | None:
    """Why the bare claim cannot run on this database, or None."""
    if connection.vendor == "postgresql":
        return None
    return (
        f"bare SKIP LOCKED claim skipped: {connection.vendor} has no FOR UPDATE SKIP LOCKED"
        " (its driver takes a wave's targets with a plain SELECT, one writer at a time);"
        " set DATABASE_URL=postgres://"
    )


@contextmanager
def _twin(source: str, twin: str) -> Iterator[None]:
    """``twin``: ``source``'s columns and indexes, empty; dropped on the way out."""
    with connection.cursor() as cur:
        cur.execute(f"DROP TABLE IF EXISTS {twin}")
        if connection.vendor == "postgresql":
            cur.execute(f"CREATE TABLE {twin} (LIKE {source} INCLUDING ALL)")
        else:
            for sql in _sqlite_schema(cur, source, twin):
                cur.execute(sql)
    try:
        yield
    finally:
        with connection.cursor() as cur:
            cur.execute(f"DROP TABLE IF EXISTS {twin}")


def _sqlite_schema(cur: Any, source: str, twin: str) -> list[str]:
    """SQLite's CREATE TABLE and CREATE INDEX statements of ``source``, renamed to ``twin``."""
    cur.execute(
        "SELECT type, sql FROM sqlite_master WHERE tbl_name = %s AND sql IS NOT NULL "
        "ORDER BY type = 'index'",
        [source],
    )
    out = []
    for kind, sql in cur.fetchall():
        if kind == "table":
            out.append(sql.replace(f'"{source}"', f'"{twin}"', 1))
        else:
            renamed = re.sub(r'INDEX "([^"]+)"', rf'INDEX "{twin}_\1"', sql, count=1)
            out.append(renamed.replace(f'ON "{source}"', f'ON "{twin}"', 1))
    return out


def bare_insert_seconds(rollout_id: int, waves: Sequence[int]) -> float:
    """The rollout's command rows, read back, inserted into a twin of the ledger's table with
    multi-row VALUES, each wave's rows in one transaction."""
    with connection.cursor() as cur:
        cur.execute(
            f"SELECT * FROM {COMMANDS} WHERE id IN (SELECT command_id FROM {TARGETS} "
            "WHERE rollout_id = %s AND wave > 1) ORDER BY id",
            [rollout_id],
        )
        columns = [c[0] for c in cur.description]
        rows = cur.fetchall()
    if len(rows) != sum(waves):
        raise BenchError(f"rollout bench: {len(rows)} command rows for {sum(waves)} targets")
    names = ", ".join(connection.ops.quote_name(c) for c in columns)
    with _twin(COMMANDS, BARE_COMMANDS):
        seconds, start = 0.0, 0
        for n in waves:
            batch = rows[start : start + n]
            start += n
            began = time.perf_counter()
            with transaction.atomic(), connection.cursor() as cur:
                _insert_many(cur, f"{BARE_COMMANDS} ({names})", len(columns), batch)
            seconds += time.perf_counter() - began
    return seconds


def _insert_many(cur: Any, table: str, width: int, rows: Sequence[Sequence[Any]]) -> None:
    per = max(1, MAX_PARAMS // width)
    for i in range(0, len(rows), per):
        part = rows[i : i + per]
        marks = ",".join(["(" + ",".join(["%s"] * width) + ")"] * len(part))
        cur.execute(f"INSERT INTO {table} VALUES {marks}", [v for r in part for v in r])


def bare_claim_seconds(rollout_id: int, waves: Sequence[int]) -> float:
    """The targets the waves started, pending again in a twin of the targets table, claimed
    in the same batches by a bare SKIP LOCKED UPDATE (each its own transaction)."""
    with _twin(TARGETS, BARE_TARGETS), connection.cursor() as cur:
        cur.execute(
            f"INSERT INTO {BARE_TARGETS} SELECT * FROM {TARGETS} "
            "WHERE rollout_id = %s AND wave > 1",
            [rollout_id],
        )
        cur.execute(f"UPDATE {BARE_TARGETS} SET step = 'pending', command_id = NULL")
        cur.execute(f"ANALYZE {BARE_TARGETS}")
        claimed, began = 0, time.perf_counter()
        for n in waves:
            cur.execute(BARE_CLAIM_SQL, [rollout_id, n])
            claimed += len(cur.fetchall())
        seconds = time.perf_counter() - began
    if claimed != sum(waves):
        raise BenchError(f"rollout bench: the bare claim took {claimed} of {sum(waves)}")
    return seconds
