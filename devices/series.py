"""Reads: one endpoint's readings over a window, bucketed by the database. Per bucket the
lowest, highest, mean and last reading and how many there were; empty buckets are left out.

Buckets are ``bucket_s`` seconds wide and aligned on the Unix epoch (UTC), so a reading falls
in the same bucket whatever window asks for it, and a window is widened to whole buckets.
``TimeBin`` puts a time in its bucket in SQL: ``date_bin`` on PostgreSQL, the same epoch
arithmetic on SQLite. The aggregates are SQL too; "last" is the reading with the latest time
(then the highest id), read in a second query by each bucket's latest time.

Where readings come from follows the admin's device chart: a bucket of whole hours reads the
hourly rollups (``TelemetryRollup``, kept ``RETENTION_ROLLUPS_DAYS``; they trail the readings
by a minute or two), any other bucket the stored telemetry (``devices.readings``, kept
``RETENTION_TELEMETRY_DAYS``), which holds every reading whether or not anything evaluates
it. Numbers, and booleans as 0/1; an enum endpoint has no series.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from django.db import NotSupportedError
from django.db.models import (
    Avg,
    Count,
    DateTimeField,
    Func,
    Max,
    Min,
    Sum,
)
from django.db.models.sql.compiler import SQLCompiler

from devices.models import DeviceInstanceEndpoint, EndpointDataType, TelemetryRollup
from devices.readings import numeric_readings

SERIES_MAX_POINTS = 1000
SERIES_DEFAULT_SPAN = timedelta(hours=24)
SERIES_MAX_SPAN = timedelta(days=731)  # the hourly rollups' default retention, and a day more
SERIES_EARLIEST = datetime(1970, 1, 1, tzinfo=UTC)  # the buckets' origin
SERIES_LATEST = datetime(9000, 1, 1, tzinfo=UTC)  # widening stays inside what a datetime holds
ROLLUP_BUCKET_S = 3600
# The bucket a request without one gets: the narrowest of these that fits the window.
BUCKET_CHOICES_S: tuple[int, ...] = (1, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600)
BUCKET_CHOICES_S += (7200, 10800, 21600, 43200, 86400)
NUMERIC_TYPES = frozenset({EndpointDataType.NUMBER, EndpointDataType.BOOL})


class SeriesRefused(ValueError):
    """The request names a window or bucket this read does not serve; ``field`` is the
    parameter at fault."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field
        self.message = message


@dataclass(frozen=True)
class SeriesWindow:
    """Whole buckets from ``start`` (inclusive) to ``end`` (exclusive)."""

    start: datetime
    end: datetime
    bucket_s: int

    @property
    def buckets(self) -> int:
        return int((self.end - self.start) / timedelta(seconds=self.bucket_s))

    @property
    def from_rollups(self) -> bool:
        return self.bucket_s % ROLLUP_BUCKET_S == 0


@dataclass(frozen=True)
class SeriesPoint:
    at: datetime  # the bucket's start
    low: float
    high: float
    mean: float
    last: float
    count: int


def _floor(at: datetime, bucket_s: int) -> datetime:
    seconds = (at - SERIES_EARLIEST) // timedelta(seconds=1)
    return SERIES_EARLIEST + timedelta(seconds=seconds - seconds % bucket_s)


def _widened(start: datetime, end: datetime, bucket_s: int) -> SeriesWindow:
    last = _floor(end, bucket_s)
    end = last if last == end else last + timedelta(seconds=bucket_s)
    return SeriesWindow(_floor(start, bucket_s), end, bucket_s)


def series_window(
    *, start: datetime | None, end: datetime | None, bucket_s: int | None, now: datetime
) -> SeriesWindow:
    """The window a request asks for: ``end`` defaults to now, ``start`` to a day before
    ``end``, the bucket to the narrowest of ``BUCKET_CHOICES_S`` that fits the window in
    ``SERIES_MAX_POINTS``. Raises ``SeriesRefused`` naming the parameter at fault."""
    end = end or now
    start = start or end - SERIES_DEFAULT_SPAN
    if start < SERIES_EARLIEST:
        raise SeriesRefused("from", "must be 1970-01-01T00:00:00Z or later")
    if end > SERIES_LATEST:
        raise SeriesRefused("to", f"must be before {SERIES_LATEST:%Y-%m-%d}")
    if start >= end:
        raise SeriesRefused("to", "must be later than from")
    if end - start > SERIES_MAX_SPAN:
        raise SeriesRefused("from", f"at most {SERIES_MAX_SPAN.days} days before to")
    if bucket_s is None:
        fitting = (_widened(start, end, b) for b in BUCKET_CHOICES_S)
        return next(w for w in fitting if w.buckets <= SERIES_MAX_POINTS)
    if bucket_s > SERIES_MAX_SPAN / timedelta(seconds=1):
        raise SeriesRefused("bucket", f"at most {SERIES_MAX_SPAN.days} days")
    window = _widened(start, end, bucket_s)
    if window.buckets > SERIES_MAX_POINTS:
        narrowest = math.ceil((end - start) / timedelta(seconds=SERIES_MAX_POINTS))
        while _widened(start, end, narrowest).buckets > SERIES_MAX_POINTS:
            narrowest += 1
        raise SeriesRefused(
            "bucket",
            f"{window.buckets} buckets: at most {SERIES_MAX_POINTS}, so {narrowest} seconds "
            "or wider for this window",
        )
    return window


class TimeBin(Func):
    """The start of the ``bucket_s``-wide bucket a time falls in, buckets aligned on the Unix
    epoch (UTC): ``date_bin`` on PostgreSQL, the same arithmetic on SQLite's epoch seconds."""

    output_field = DateTimeField()

    def __init__(self, expression: Any, *, bucket_s: int) -> None:
        super().__init__(expression)
        self.bucket_s = int(bucket_s)  # written into the SQL: an int, never text

    def as_sql(self, *args: Any, **kwargs: Any) -> Any:
        raise NotSupportedError("TimeBin is written for PostgreSQL and SQLite")

    def as_postgresql(self, compiler: SQLCompiler, connection: Any, **extra: Any) -> Any:
        sql, params = compiler.compile(self.source_expressions[0])
        origin = "TIMESTAMPTZ '1970-01-01 00:00:00+00'"
        return f"date_bin(make_interval(secs => {self.bucket_s}), {sql}, {origin})", params

    def as_sqlite(self, compiler: SQLCompiler, connection: Any, **extra: Any) -> Any:
        sql, params = compiler.compile(self.source_expressions[0])
        n = self.bucket_s
        epoch = f"CAST(strftime('%%s', {sql}) AS INTEGER)"
        floored = f"{epoch} - (({epoch} %% {n}) + {n}) %% {n}"
        return f"datetime({floored}, 'unixepoch')", [*params, *params]


def endpoint_series(*, endpoint: DeviceInstanceEndpoint, window: SeriesWindow) -> list[SeriesPoint]:
    """The endpoint's non-empty buckets in ``window``, oldest first: two queries
    (``endpoint`` with its ``profile_endpoint`` loaded)."""
    if window.from_rollups:
        return _from_rollups(endpoint.pk, window)
    return _from_telemetry(endpoint, window)


def _from_telemetry(endpoint: DeviceInstanceEndpoint, window: SeriesWindow) -> list[SeriesPoint]:
    profile = endpoint.profile_endpoint
    readings = numeric_readings(
        device_id=endpoint.device_id,
        key=profile.key,
        data_type=profile.data_type,
        start=window.start,
        end=window.end,
    )
    groups = list(
        readings.annotate(t=TimeBin("message_ts", bucket_s=window.bucket_s))
        .values("t")
        .annotate(
            low=Min("v"), high=Max("v"), mean=Avg("v"), n=Count("v"), last_at=Max("message_ts")
        )
        .order_by("t")
    )
    ends = [g["last_at"] for g in groups]
    latest = readings.filter(message_ts__in=ends).order_by("message_ts", "pk")
    last = dict(latest.values_list("message_ts", "v"))  # of readings at one time, the newest row's
    return [
        SeriesPoint(g["t"], g["low"], g["high"], g["mean"], last[g["last_at"]], g["n"])
        for g in groups
    ]


def _from_rollups(endpoint_id: int, window: SeriesWindow) -> list[SeriesPoint]:
    """Hours merged exactly: lowest of the lows, highest of the highs, summed sums and
    counts, and the last reading of the hour whose last reading is latest."""
    hours = TelemetryRollup.objects.filter(
        endpoint_id=endpoint_id, hour__gte=window.start, hour__lt=window.end
    ).annotate(t=TimeBin("hour", bucket_s=window.bucket_s))
    groups = list(
        hours.values("t")
        .annotate(
            low=Min("value_min"),
            high=Max("value_max"),
            total=Sum("value_sum"),
            n=Sum("value_count"),
            latest=Max("last_at"),
        )
        .order_by("t")
    )
    latest = hours.filter(last_at__in=[g["latest"] for g in groups])
    last = dict(latest.values_list("last_at", "last_value"))
    return [
        SeriesPoint(g["t"], g["low"], g["high"], g["total"] / g["n"], last[g["latest"]], g["n"])
        for g in groups
    ]
