"""Time partitions of the largest append-only tables on PostgreSQL (raw telemetry and
endpoint events), so retention drops a whole partition, metadata only, instead of deleting
rows one by one (which leaves dead tuples and WAL behind on a table of billions of rows).

Each such table is ``PARTITION BY RANGE`` on its device-time column, in partitions of
``TELEMETRY_PARTITION_SPAN_S`` aligned on the epoch, plus a ``…_default`` partition that
takes any row no range holds (a test's reading from last year, a clock far off), so an
insert never fails for want of a partition. Beat (``common.retention_prune``) creates the
ranges ahead of time, moving rows the default holds for a new range into it, and detaches
and drops expired ranges that hold nothing still needed; the batched DELETE of
``common.retention`` then takes what is left (the default's old rows, the prunable rows of a
range that had to stay). SQLite keeps plain tables and only the batched DELETE.

Plain migrations build the tables (``partitioned_table_convert``), not an extension
library: the models stay ordinary Django models with an ``id`` primary key (the database's
key is (id, time), which the id's sequence keeps unique on its own), so the ORM, the admin
and SQLite need nothing else, and the SQL is a few statements this module holds."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from django.db import connection, transaction

MIGRATION_MAX_RANGES = 62
LOCK_TIMEOUT = "2s"  # a drop waits this long for readers, else the next run tries again
_BOUND = re.compile(r"FROM \('([^']+)'\) TO \('([^']+)'\)")


@dataclass(frozen=True)
class Partition:
    name: str
    lo: datetime
    hi: datetime


def is_partitioned(table: str) -> bool:
    if connection.vendor != "postgresql":
        return False
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT c.relkind = 'p' FROM pg_class c WHERE c.oid = to_regclass(%s)", [table]
        )
        row = cursor.fetchone()
    return bool(row and row[0])


def partitions(table: str) -> list[Partition]:
    """The table's range partitions, oldest first (the default partition is not listed)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT c.relname, pg_get_expr(c.relpartbound, c.oid) FROM pg_inherits i "
            "JOIN pg_class c ON c.oid = i.inhrelid WHERE i.inhparent = %s::regclass",
            [table],
        )
        found = []
        for name, bound in cursor.fetchall():
            match = _BOUND.search(bound or "")
            if match is not None:
                lo, hi = (datetime.fromisoformat(v).astimezone(UTC) for v in match.groups())
                found.append(Partition(name, lo, hi))
    return sorted(found, key=lambda p: p.lo)


def window(ts: datetime, span_s: int) -> tuple[datetime, datetime]:
    """The span-wide window, aligned on the epoch, that holds ``ts``."""
    start = int(ts.timestamp()) // span_s * span_s
    lo = datetime.fromtimestamp(start, UTC)
    return lo, lo + timedelta(seconds=span_s)


def partition_name(table: str, lo: datetime) -> str:
    return f"{table}_p{lo:%Y%m%d_%H%M%S}"


def _gaps(
    lo: datetime, hi: datetime, existing: Sequence[Partition]
) -> list[tuple[datetime, datetime]]:
    """The parts of [lo, hi) no existing range covers (a span changed between runs leaves
    ranges of another width; new ones fill around them, never overlap)."""
    gaps, cursor_at = [], lo
    for part in existing:
        if part.hi <= cursor_at or part.lo >= hi:
            continue
        if part.lo > cursor_at:
            gaps.append((cursor_at, part.lo))
        cursor_at = max(cursor_at, part.hi)
    if cursor_at < hi:
        gaps.append((cursor_at, hi))
    return gaps


def partitions_ensure(
    table: str, key: str, *, start: datetime, end: datetime, span_s: int
) -> list[str]:
    """Create every missing range between ``start`` and ``end``; the names created. Rows the
    default partition holds for a new range move into it in the same transaction."""
    created = []
    existing = partitions(table)  # read once: the ranges made below never overlap a window
    lo, _ = window(start, span_s)
    while lo < end:
        hi = lo + timedelta(seconds=span_s)
        for gap_lo, gap_hi in _gaps(lo, hi, existing):
            created.append(_partition_create(table, key, gap_lo, gap_hi))
        lo = hi
    return created


def _partition_create(table: str, key: str, lo: datetime, hi: datetime) -> str:
    qn = connection.ops.quote_name
    name = partition_name(table, lo)
    default = qn(f"{table}_default")
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(f"SET LOCAL lock_timeout = '{LOCK_TIMEOUT}'")
        # Every lock up front, the default partition's strongest first: taking a weaker one
        # and then upgrading it while ingest waits on it deadlocks (seen under load).
        cursor.execute(f"LOCK TABLE {default} IN ACCESS EXCLUSIVE MODE")
        cursor.execute(f"LOCK TABLE {qn(table)} IN SHARE UPDATE EXCLUSIVE MODE")
        cursor.execute(f"CREATE TABLE {qn(name)} (LIKE {qn(table)} INCLUDING DEFAULTS)")
        in_range = f"{qn(key)} >= %s AND {qn(key)} < %s"
        cursor.execute(
            f"WITH moved AS (DELETE FROM {default} WHERE {in_range} RETURNING *) "
            f"INSERT INTO {qn(name)} SELECT * FROM moved",
            [lo, hi],
        )
        cursor.execute(
            f"ALTER TABLE {qn(table)} ATTACH PARTITION {qn(name)} FOR VALUES FROM (%s) TO (%s)",
            [lo, hi],
        )
    return name


def partition_drop(table: str, part: Partition) -> int:
    """Detach and drop one range; the rows it held (counted before the drop, for
    ``farm_retention_pruned_rows_total``). The count runs before the table's exclusive lock:
    a day's range holds millions of readings, and ingest must not wait on counting them (past the
    retention, which outlasts ``TELEMETRY_MAX_AGE_S`` by default, a range gets no new rows)."""
    qn = connection.ops.quote_name
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT count(*) FROM {qn(part.name)}")
        rows = int(cursor.fetchone()[0])
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(f"SET LOCAL lock_timeout = '{LOCK_TIMEOUT}'")
        # Deferred key checks of rows written earlier in the same transaction (a caller's
        # outer one) would forbid the drop: check them now.
        cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")
        # The detach's lock first, before any weaker one on the table (an upgrade while
        # ingest waits on the weaker lock deadlocks, seen under load).
        cursor.execute(f"LOCK TABLE {qn(table)} IN ACCESS EXCLUSIVE MODE")
        cursor.execute(f"ALTER TABLE {qn(table)} DETACH PARTITION {qn(part.name)}")
        cursor.execute(f"DROP TABLE {qn(part.name)}")
    return rows


def partitioned_table_convert(
    schema_editor: Any,
    *,
    table: str,
    key: str,
    primary_key: str,
    finish: Sequence[str],
    span_s: int,
    start: datetime,
    end: datetime,
    partitioned: bool = True,
) -> None:
    """Turn a plain table into a partitioned one (``partitioned=False``: back into a plain one,
    for a migration undone) of the same name and columns, in the
    migration's transaction: rename it aside, create the partitioned table, ranges from
    ``start`` to ``end`` and the default, copy every row, then build the keys and indexes
    (``finish``, run after the copy: building an index once is cheaper than maintaining it
    row by row), move the id sequence over and drop the old table. Nothing is lost: the copy
    is one INSERT … SELECT checked against the old table's count before the drop."""
    qn = schema_editor.quote_name
    old = f"{table}_unpartitioned"
    run = schema_editor.execute
    run(f"ALTER TABLE {qn(table)} RENAME TO {qn(old)}")
    with schema_editor.connection.cursor() as cursor:
        cursor.execute(
            "SELECT indexrelid::regclass::text FROM pg_index WHERE indrelid = %s::regclass",
            [old],
        )
        old_indexes = [row[0] for row in cursor.fetchall()]
        cursor.execute(
            "SELECT conname FROM pg_constraint WHERE conrelid = %s::regclass AND contype IN "
            "('p', 'u', 'f')",
            [old],
        )
        old_constraints = [row[0] for row in cursor.fetchall()]
        cursor.execute("SELECT pg_get_serial_sequence(%s, 'id')", [old])
        sequence = cursor.fetchone()[0]
        issued = 0
        if sequence:
            cursor.execute(f"SELECT last_value FROM {sequence}")
            issued = int(cursor.fetchone()[0])
    # The old id's sequence goes (its name is the new one's); the new starts past it.
    run(f"ALTER TABLE {qn(old)} ALTER COLUMN id DROP IDENTITY IF EXISTS")
    run(f"ALTER TABLE {qn(old)} ALTER COLUMN id DROP DEFAULT")
    if sequence:
        run(f"DROP SEQUENCE IF EXISTS {sequence}")
    # The old keys and indexes go first: their names are the new table's.
    for name in old_constraints:
        run(f"ALTER TABLE {qn(old)} DROP CONSTRAINT {qn(name)} CASCADE")
    for name in old_indexes:
        run(f"DROP INDEX IF EXISTS {name}")
    by_range = f" PARTITION BY RANGE ({qn(key)})" if partitioned else ""
    run(f"CREATE TABLE {qn(table)} (LIKE {qn(old)} INCLUDING DEFAULTS){by_range}")
    # An identity column cannot be a partitioned table's (before PostgreSQL 17): the id takes
    # its values from a sequence of its own, continuing where the old one stood.
    new_sequence = f"{table}_id_seq"
    run(f"CREATE SEQUENCE {qn(new_sequence)} AS bigint")
    run(f"ALTER TABLE {qn(table)} ALTER COLUMN id SET DEFAULT nextval('{new_sequence}')")
    run(f"ALTER SEQUENCE {qn(new_sequence)} OWNED BY {qn(table)}.id")
    if partitioned:
        run(f"CREATE TABLE {qn(table + '_default')} PARTITION OF {qn(table)} DEFAULT")
    lo, _ = window(start, span_s)
    while partitioned and lo < end:
        hi = lo + timedelta(seconds=span_s)
        run(
            f"CREATE TABLE {qn(partition_name(table, lo))} PARTITION OF {qn(table)} "
            f"FOR VALUES FROM (%s) TO (%s)",
            [lo, hi],
        )
        lo = hi
    run(f"INSERT INTO {qn(table)} SELECT * FROM {qn(old)}")
    with schema_editor.connection.cursor() as cursor:
        cursor.execute(
            f"SELECT (SELECT count(*) FROM {qn(old)}), (SELECT count(*) FROM {qn(table)}), "
            f"(SELECT coalesce(max(id), 0) FROM {qn(old)})"
        )
        before, after, top = cursor.fetchone()
        if before != after:
            raise RuntimeError(f"{table}: {before} rows before the copy, {after} after")
        cursor.execute("SELECT setval(%s, %s)", [new_sequence, max(top, issued, 1)])
    run(f"ALTER TABLE {qn(table)} ADD PRIMARY KEY ({primary_key})")
    for statement in finish:
        run(statement)
    run(f"DROP TABLE {qn(old)} CASCADE")


def model_finish_sql(model: Any, schema_editor: Any) -> list[str]:
    """What the model declares beyond its columns, as the schema editor would create it:
    unique constraints, indexes (a foreign key's included) and foreign-key constraints."""
    statements = [str(c.create_sql(model, schema_editor)) for c in model._meta.constraints]
    statements += [str(s) for s in schema_editor._model_indexes_sql(model)]
    for field in model._meta.local_fields:
        target = field.related_model._meta.db_table if field.remote_field is not None else ""
        # A key into a partitioned table would need its partition key (a migration undone
        # while the table it points at stays partitioned).
        if field.remote_field is not None and field.db_constraint and not is_partitioned(target):
            fk = schema_editor._create_fk_sql(model, field, "_fk_%(to_table)s_%(to_column)s")
            statements.append(str(fk))
    return statements


def ahead_until(now: datetime) -> datetime:
    """How far ahead ranges exist: past the newest device time ingest accepts, by
    ``TELEMETRY_PARTITIONS_AHEAD`` spans (beat runs far more often than a span passes)."""
    from django.conf import settings

    span = int(settings.TELEMETRY_PARTITION_SPAN_S)
    ahead = float(settings.TELEMETRY_MAX_FUTURE_S) + span * int(settings.TELEMETRY_PARTITIONS_AHEAD)
    return now + timedelta(seconds=ahead)


def partition_migration(app_label: str, model_name: str, key: str, retention_setting: str) -> Any:
    """The migration step that partitions one model's table on PostgreSQL (and undoes it),
    so each app's migration names only its model, key and retention."""
    from django.db import migrations
    from django.utils import timezone

    def forwards(apps: Any, schema_editor: Any) -> None:
        model = apps.get_model(app_label, model_name)
        model_partition(
            schema_editor, model, key, retention_setting=retention_setting, now=timezone.now()
        )

    def backwards(apps: Any, schema_editor: Any) -> None:
        model_unpartition(schema_editor, apps.get_model(app_label, model_name), key)

    return migrations.RunPython(forwards, backwards, elidable=False)


def model_unpartition(schema_editor: Any, model: Any, key: str) -> None:
    """Undo ``model_partition``: the same rows in a plain table with ``model``'s keys."""
    if schema_editor.connection.vendor != "postgresql":
        return
    column = model._meta.get_field(key).column
    now = datetime.now(UTC)
    partitioned_table_convert(
        schema_editor,
        table=model._meta.db_table,
        key=column,
        primary_key="id",
        finish=model_finish_sql(model, schema_editor),
        span_s=3600,
        start=now,
        end=now,
        partitioned=False,
    )


def model_partition(
    schema_editor: Any, model: Any, key: str, *, retention_setting: str, now: datetime
) -> None:
    """Convert ``model``'s table in a migration, with ranges from its retention (or the
    oldest device time ingest accepts, if longer) to ``ahead_until``; older rows go to the
    default partition, which the batched prune empties."""
    from django.conf import settings

    if schema_editor.connection.vendor != "postgresql":
        return
    span = int(settings.TELEMETRY_PARTITION_SPAN_S)
    keep_s = max(float(getattr(settings, retention_setting)) * 86400, settings.TELEMETRY_MAX_AGE_S)
    # At most MIGRATION_MAX_RANGES ranges back (a narrow span would make thousands in one
    # transaction); anything older lands in the default partition.
    keep_s = min(keep_s, span * MIGRATION_MAX_RANGES)
    column = model._meta.get_field(key).column
    partitioned_table_convert(
        schema_editor,
        table=model._meta.db_table,
        key=column,
        primary_key=f"id, {schema_editor.quote_name(column)}",
        finish=model_finish_sql(model, schema_editor),
        span_s=span,
        start=now - timedelta(seconds=keep_s),
        end=ahead_until(now),
    )
