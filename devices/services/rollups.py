"""Hourly rollups of endpoint readings (``TelemetryRollup``), folded in from raw telemetry
behind a database watermark, so charts and reports still work once raw telemetry is pruned.

* Each telemetry row is folded in once. A batch reads the rows after the watermark, upserts
  their (endpoint, hour) aggregates and moves the watermark in one transaction, holding the
  watermark row's lock: a redelivered or repeated run finds those rows behind the watermark,
  a concurrent one finds the row locked and returns (it does not wait).
* No row is passed over for committing late. Ids are handed out before commit, so a row can
  become visible after a higher id already did. A run folds only up to a *horizon*: the
  highest id visible at ``horizon_at``, once ``ROLLUP_SETTLE_S`` has passed since. Every
  lower id was handed out before that instant, so its transaction has ended unless it lasted
  longer than the delay (the trade-off: such a row would be missed). ``received_at`` cannot
  serve: it is the bridge's or the HTTP client's time, minutes before a queued ingest.
  The cost: rollups trail raw telemetry by one to two beat intervals.
* Merges are exact: min, max, count and the last reading (newest device time, then newest
  row) do not depend on how the rows were split into batches; sum and count are stored, so
  an average is exact up to the order of float additions.
* A batch costs the same statements whatever its size: lock, rows, their endpoints, one
  upsert, the watermark.

Values are read from each row's payload as ingest reads them (``values`` by endpoint key,
the type checks of ``devices.values``): numbers, and booleans as 0/1; enums are not rolled up.
A prune of raw telemetry must keep the rows above the watermark
(``devices.selectors.telemetry_rolled_up_through``), or a stalled job loses them.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.db import connection, transaction
from django.db.models import Field, Max
from django.utils import timezone

from common.json_types import JsonObject, JsonValue
from common.sql import insert_ignore_returning
from devices.models import (
    DeviceInstanceEndpoint,
    EndpointDataType,
    Telemetry,
    TelemetryRollup,
    TelemetryRollupWatermark,
)
from devices.values import value_has_type

ROLLUP_BATCH = 1000  # telemetry rows per batch
ROLLUP_MAX_BATCHES = 200  # per run (about 8,000 rows a second): the next run takes the rest
ROLLUP_BUDGET_S = 30.0  # per run, inside the task's soft time limit
# Longer than any ingest transaction lasts (and the workers' clock skew); shorter than the
# beat interval, so that each run folds what the run before it saw.
ROLLUP_SETTLE_S = 30.0
ROLLUP_PRUNE_BATCH = 5000
ROLLUP_PRUNE_MAX_BATCHES = 10
WATERMARK_ID = 1
RETENTION_SETTING = "RETENTION_ROLLUPS_DAYS"  # read by name: config/env_retention.py sets it

Clock = Callable[[], datetime]
_FIELDS = (
    "endpoint",
    "hour",
    "value_min",
    "value_max",
    "value_sum",
    "value_count",
    "last_value",
    "last_at",
)
_PG_TYPES = (
    "bigint",
    "timestamptz",
    "float8",
    "float8",
    "float8",
    "integer",
    "float8",
    "timestamptz",
)


@dataclass
class RollupRun:
    telemetry_rows: int = 0  # folded in
    rollup_rows: int = 0  # (endpoint, hour) aggregates upserted
    batches: int = 0
    pruned: int = 0
    busy: bool = False  # another run held the watermark


@dataclass
class _Hour:
    """One (endpoint, hour)'s readings in a batch."""

    low: float
    high: float
    total: float
    count: int
    last: float
    last_at: datetime

    def add(self, value: float, at: datetime) -> None:
        self.low, self.high = min(self.low, value), max(self.high, value)
        self.total += value
        self.count += 1
        if at >= self.last_at:  # rows come in id order: a tie goes to the newer row
            self.last, self.last_at = value, at


@dataclass(frozen=True)
class _Step:
    rows: int = 0
    rollups: int = 0
    more: bool = False  # more may be folded now
    busy: bool = False


def telemetry_rollups_advance(
    *,
    clock: Clock = timezone.now,
    batch_size: int = ROLLUP_BATCH,
    max_batches: int = ROLLUP_MAX_BATCHES,
    budget_s: float = ROLLUP_BUDGET_S,
    settle_s: float = ROLLUP_SETTLE_S,
) -> RollupRun:
    """Fold settled telemetry into the hourly rollups in bounded batches, then prune rollups
    past ``RETENTION_ROLLUPS_DAYS``; stops at ``max_batches`` or ``budget_s``."""
    run = RollupRun()
    deadline = time.monotonic() + budget_s
    for _ in range(max_batches):
        step = _step(clock, batch_size, settle_s)
        run.busy = step.busy
        if step.rows:
            run.batches += 1
            run.telemetry_rows += step.rows
            run.rollup_rows += step.rollups
        if not step.more or time.monotonic() > deadline:
            break
    if not run.busy:
        run.pruned = telemetry_rollups_prune(now=clock())
    return run


def _step(clock: Clock, batch_size: int, settle_s: float) -> _Step:
    """One transaction: take a new horizon when the last one is reached, else fold the next
    batch up to a settled horizon."""
    with transaction.atomic():
        mark = _watermark_locked()
        if mark is None:
            return _Step(busy=True)
        through, horizon = mark.rolled_up_through, mark.horizon_id
        if through >= horizon:
            return _horizon_take(mark, clock, settle_s)
        if mark.horizon_at is None or clock() < mark.horizon_at + timedelta(seconds=settle_s):
            return _Step()
        rows = list(
            Telemetry.objects.filter(pk__gt=through, pk__lte=horizon)
            .order_by("pk")
            .values_list("pk", "device_id", "raw_payload", "message_ts")[:batch_size]
        )
        hours = _hours(rows, _endpoints({row[1] for row in rows}) if rows else {})
        _upsert(hours)
        moved = rows[-1][0] if len(rows) == batch_size else horizon
        TelemetryRollupWatermark.objects.filter(pk=WATERMARK_ID).update(rolled_up_through=moved)
        return _Step(rows=len(rows), rollups=len(hours), more=True)


def _watermark_locked() -> TelemetryRollupWatermark | None:
    """The watermark row, locked for this transaction (made on the first run); None when
    another run holds it."""
    rows = TelemetryRollupWatermark.objects.filter(pk=WATERMARK_ID)
    locked = rows.select_for_update(skip_locked=True)
    if not connection.features.has_select_for_update_skip_locked:
        locked = rows  # SQLite: one writer at a time anyway
    mark = locked.first()
    if mark is None and not rows.exists():
        insert_ignore_returning(TelemetryRollupWatermark, [{"id": WATERMARK_ID}])
        mark = locked.first()
    return mark


def _horizon_take(mark: TelemetryRollupWatermark, clock: Clock, settle_s: float) -> _Step:
    """The watermark reached its horizon: all rows visible at ``horizon_at`` are in, and the
    highest id visible now becomes the next horizon."""
    top = Telemetry.objects.aggregate(top=Max("pk"))["top"] or 0
    at = clock()  # read after the ids: each id up to ``top`` was handed out before ``at``
    horizon = max(top, mark.rolled_up_through)
    TelemetryRollupWatermark.objects.filter(pk=WATERMARK_ID).update(
        horizon_id=horizon, horizon_at=at, covered_at=mark.horizon_at or mark.covered_at
    )
    return _Step(more=horizon > mark.rolled_up_through and settle_s <= 0)


def _endpoints(device_ids: set[int]) -> dict[tuple[int, str], tuple[int, str]]:
    """(device, key) → (endpoint, data type) of the rolled-up types."""
    rows = DeviceInstanceEndpoint.objects.filter(device_id__in=device_ids).exclude(
        profile_endpoint__data_type=EndpointDataType.ENUM
    )
    found = rows.values_list(
        "device_id", "profile_endpoint__key", "pk", "profile_endpoint__data_type"
    )
    return {(device, key): (pk, data_type) for device, key, pk, data_type in found}


def _hours(
    rows: Sequence[tuple[int, int, str, datetime]],
    endpoints: dict[tuple[int, str], tuple[int, str]],
) -> dict[tuple[int, datetime], _Hour]:
    hours: dict[tuple[int, datetime], _Hour] = {}
    for _pk, device_id, payload, at in rows:
        hour = at.replace(minute=0, second=0, microsecond=0)
        for key, raw in _values(payload).items():
            endpoint = endpoints.get((device_id, key))
            value = None if endpoint is None else _reading(endpoint[1], raw)
            if endpoint is None or value is None:
                continue
            one = hours.get((endpoint[0], hour))
            if one is None:
                hours[(endpoint[0], hour)] = _Hour(value, value, value, 1, value, at)
            else:
                one.add(value, at)
    return hours


def _values(payload: str) -> JsonObject:
    """The payload's ``values`` (a stored row passed ingest's checks; anything else is none)."""
    try:
        body = json.loads(payload)
    except (ValueError, RecursionError):
        return {}
    values = body.get("values") if isinstance(body, dict) else None
    return values if isinstance(values, dict) else {}


def _reading(data_type: str, value: JsonValue) -> float | None:
    """The value as a number when ingest would have stored it as a reading."""
    if not isinstance(value, int | float):  # numbers and booleans: enums are not rolled up
        return None
    try:
        return float(value) if value_has_type(data_type, value) else None
    except OverflowError:  # an integer too large for a float: ingest refuses it too
        return None


def _upsert(hours: dict[tuple[int, datetime], _Hour]) -> None:
    """One INSERT … ON CONFLICT (endpoint, hour) DO UPDATE that merges each aggregate into
    the stored one; the whole batch travels as array (PostgreSQL) or one JSON (SQLite)
    parameters, so the statement does not grow with it."""
    if not hours:
        return
    meta = TelemetryRollup._meta
    qn = connection.ops.quote_name
    table = qn(meta.db_table)
    columns = [qn(_column(name)) for name in _FIELDS]
    postgres = connection.vendor == "postgresql"
    stamp: Callable[[datetime], datetime | str | None] = (
        (lambda at: at) if postgres else connection.ops.adapt_datetimefield_value
    )
    rows = [
        [endpoint, stamp(hour), h.low, h.high, h.total, h.count, h.last, stamp(h.last_at)]
        for (endpoint, hour), h in hours.items()
    ]
    if postgres:
        source = f"SELECT * FROM unnest({', '.join(f'%s::{t}[]' for t in _PG_TYPES)})"
        # One array per column (PostgreSQL), or the whole batch as one JSON text (SQLite).
        params: list[list[object] | str] = [list(column) for column in zip(*rows, strict=True)]
    else:
        picks = ", ".join(f"json_extract(value, '$[{i}]')" for i in range(len(columns)))
        source = f"SELECT {picks} FROM json_each(%s) WHERE true"  # WHERE: SQLite's upsert parse
        params = [json.dumps(rows)]
    least, greatest = ("LEAST", "GREATEST") if postgres else ("MIN", "MAX")
    low, high, total, count, last, last_at = columns[2:]
    newer = f"EXCLUDED.{last_at} >= {table}.{last_at}"
    merge = ", ".join(
        [
            f"{low} = {least}({table}.{low}, EXCLUDED.{low})",
            f"{high} = {greatest}({table}.{high}, EXCLUDED.{high})",
            f"{total} = {table}.{total} + EXCLUDED.{total}",
            f"{count} = {table}.{count} + EXCLUDED.{count}",
            f"{last} = CASE WHEN {newer} THEN EXCLUDED.{last} ELSE {table}.{last} END",
            f"{last_at} = CASE WHEN {newer} THEN EXCLUDED.{last_at} ELSE {table}.{last_at} END",
        ]
    )
    sql = (
        f"INSERT INTO {table} ({', '.join(columns)}) {source} "
        f"ON CONFLICT ({columns[0]}, {columns[1]}) DO UPDATE SET {merge}"
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, params)


def _column(name: str) -> str:
    """The field's column as SQL names it (a foreign key's ends in ``_id``)."""
    field = TelemetryRollup._meta.get_field(name)
    if not isinstance(field, Field) or field.column is None:
        raise TypeError(f"{name} is not a column of {TelemetryRollup._meta.db_table}")
    return field.column


def telemetry_rollups_prune(
    *, now: datetime, batch: int = ROLLUP_PRUNE_BATCH, max_batches: int = ROLLUP_PRUNE_MAX_BATCHES
) -> int:
    """Rollups of hours older than ``RETENTION_ROLLUPS_DAYS``, oldest first, one bounded
    DELETE per batch on the hour index; the number deleted."""
    cutoff = now - timedelta(days=int(getattr(settings, RETENTION_SETTING)))
    total = 0
    for _ in range(max_batches):
        oldest = TelemetryRollup.objects.filter(hour__lt=cutoff).order_by("hour")
        deleted, _ = TelemetryRollup.objects.filter(pk__in=oldest.values("pk")[:batch]).delete()
        total += deleted
        if deleted < batch:
            break
    return total
