"""Reads: one endpoint's readings over a window, bucketed by the database. Per bucket the
lowest, highest, mean and last reading and how many there were; empty buckets are left out.

Buckets are ``bucket_s`` seconds wide and aligned on the Unix epoch (UTC), so a reading falls
in the same bucket whatever window asks for it, and a window is widened to whole buckets.
``TimeBin`` puts a time in its bucket in SQL: ``date_bin`` on PostgreSQL, the same epoch
arithmetic on SQLite. A bucket of whole days is the farm's: it starts at a local midnight
(``common.localtime``), so a day of a DST change is 23 or 25 hours long; ``LocalDayBin`` puts a
time in its local day from the zone's UTC offsets over the window, worked out in Python and
written into the SQL, so both databases and the bucket starts agree with ``zoneinfo``. The
aggregates are SQL too; "last" is the reading with the latest time (then the highest id), read
in a second query by each bucket's latest time.

Where readings come from follows the admin's device chart: a bucket of whole hours reads the
hourly rollups (``TelemetryRollup``, kept ``RETENTION_ROLLUPS_DAYS``; they trail the readings
by a minute or two), any other bucket the stored telemetry (``devices.readings``, kept
``RETENTION_TELEMETRY_DAYS``), which holds every reading whether or not anything evaluates
it. Local days read the rollups only where every local midnight of the window is a whole UTC
hour: in a zone offset by a fraction of an hour (Asia/Kolkata) an hour would straddle two
days. Numbers, and booleans as 0/1; an enum endpoint has no series.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

from django.db import NotSupportedError
from django.db.models import (
    Avg,
    Count,
    DateTimeField,
    Func,
    IntegerField,
    Max,
    Min,
    Sum,
)
from django.db.models.sql.compiler import SQLCompiler

from common.localtime import local_day_start
from devices.models import DeviceInstanceEndpoint, EndpointDataType, TelemetryRollup
from devices.readings import numeric_readings

SERIES_MAX_POINTS = 1000
SERIES_DEFAULT_SPAN = timedelta(hours=24)
SERIES_MAX_SPAN = timedelta(days=731)  # the hourly rollups' default retention, and a day more
SERIES_EARLIEST = datetime(1970, 1, 1, tzinfo=UTC)  # the buckets' origin
SERIES_LATEST = datetime(9000, 1, 1, tzinfo=UTC)  # widening stays inside what a datetime holds
ROLLUP_BUCKET_S = 3600
DAY_S = 86400  # a bucket of a whole number of these is a run of the farm's local days
LOCAL_EPOCH = date(1970, 1, 1)  # local days are numbered from this date in the farm's zone
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
    """Whole buckets from ``start`` (inclusive) to ``end`` (exclusive); buckets of whole days
    are local days of ``time_zone``."""

    start: datetime
    end: datetime
    bucket_s: int
    time_zone: str = "UTC"

    @property
    def local_days(self) -> bool:
        return self.bucket_s % DAY_S == 0

    @property
    def buckets(self) -> int:
        if self.local_days:
            span = _local_day(self.end, self.time_zone) - _local_day(self.start, self.time_zone)
            return span // (self.bucket_s // DAY_S)
        return int((self.end - self.start) / timedelta(seconds=self.bucket_s))

    @property
    def from_rollups(self) -> bool:
        if self.bucket_s % ROLLUP_BUCKET_S:
            return False
        return not self.local_days or all(
            edge.minute == edge.second == edge.microsecond == 0 for edge in self.edges()
        )

    def edges(self) -> list[datetime]:
        """Each bucket's start and the window's end, as UTC instants."""
        if not self.local_days:
            step = timedelta(seconds=self.bucket_s)
            return [self.start + i * step for i in range(self.buckets + 1)]
        first, days = _local_day(self.start, self.time_zone), self.bucket_s // DAY_S
        return [_day_start(first + i * days, self.time_zone) for i in range(self.buckets + 1)]


@dataclass(frozen=True)
class SeriesPoint:
    at: datetime  # the bucket's start
    low: float
    high: float
    mean: float
    last: float
    count: int


def _local_day(at: datetime, time_zone: str) -> int:
    """The number of the local day ``at`` falls in, counted from ``LOCAL_EPOCH``."""
    return (at.astimezone(ZoneInfo(time_zone)).date() - LOCAL_EPOCH).days


def _day_start(day: int, time_zone: str) -> datetime:
    return local_day_start(LOCAL_EPOCH + timedelta(days=day), time_zone).astimezone(UTC)


def _floor(at: datetime, bucket_s: int, time_zone: str) -> datetime:
    if bucket_s % DAY_S == 0:
        day, days = _local_day(at, time_zone), bucket_s // DAY_S
        return _day_start(day - day % days, time_zone)
    seconds = (at - SERIES_EARLIEST) // timedelta(seconds=1)
    return SERIES_EARLIEST + timedelta(seconds=seconds - seconds % bucket_s)


def _widened(start: datetime, end: datetime, bucket_s: int, time_zone: str) -> SeriesWindow:
    last = _floor(end, bucket_s, time_zone)
    if last != end:
        if bucket_s % DAY_S == 0:
            days = bucket_s // DAY_S
            last = _day_start(_local_day(last, time_zone) + days, time_zone)
        else:
            last += timedelta(seconds=bucket_s)
    return SeriesWindow(_floor(start, bucket_s, time_zone), last, bucket_s, time_zone)


def series_window(
    *,
    start: datetime | None,
    end: datetime | None,
    bucket_s: int | None,
    now: datetime,
    time_zone: str = "UTC",
) -> SeriesWindow:
    """The window a request asks for: ``end`` defaults to now, ``start`` to a day before
    ``end``, the bucket to the narrowest of ``BUCKET_CHOICES_S`` that fits the window in
    ``SERIES_MAX_POINTS``; whole-day buckets are local days of ``time_zone`` (the farm's).
    Raises ``SeriesRefused`` naming the parameter at fault."""
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
        fitting = (_widened(start, end, b, time_zone) for b in BUCKET_CHOICES_S)
        return next(w for w in fitting if w.buckets <= SERIES_MAX_POINTS)
    if bucket_s > SERIES_MAX_SPAN / timedelta(seconds=1):
        raise SeriesRefused("bucket", f"at most {SERIES_MAX_SPAN.days} days")
    window = _widened(start, end, bucket_s, time_zone)
    if window.buckets > SERIES_MAX_POINTS:
        narrowest = math.ceil((end - start) / timedelta(seconds=SERIES_MAX_POINTS))
        while _widened(start, end, narrowest, time_zone).buckets > SERIES_MAX_POINTS:
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


@dataclass(frozen=True)
class OffsetSpan:
    """From the previous span's ``until`` up to ``until`` (epoch seconds; None: on and on),
    the zone is ``offset_s`` seconds ahead of UTC."""

    until: int | None
    offset_s: int


OFFSET_PROBE = timedelta(hours=6)  # no zone has changed its offset twice within this


def _offset_s(at: datetime, zone: ZoneInfo) -> int:
    offset = at.astimezone(zone).utcoffset()
    return int(offset.total_seconds()) if offset is not None else 0


def offset_spans(start: datetime, end: datetime, time_zone: str) -> list[OffsetSpan]:
    """The zone's UTC offsets over [``start``, ``end``), each change found to the second
    (probed every ``OFFSET_PROBE``, then bisected): a window of two years is about 3,000
    probes, and its changes the few spans the SQL compares with."""
    zone = ZoneInfo(time_zone)
    spans: list[OffsetSpan] = []
    at, offset = start, _offset_s(start, zone)
    while at < end:
        probe = min(at + OFFSET_PROBE, end)
        if _offset_s(probe, zone) != offset:
            low, high = at, probe  # the offset changes in (low, high]
            while high - low > timedelta(seconds=1):
                middle = low + (high - low) / 2
                low, high = (middle, high) if _offset_s(middle, zone) == offset else (low, middle)
            changed = math.floor(high.timestamp())  # changes fall on whole seconds
            spans.append(OffsetSpan(changed, offset))
            offset = _offset_s(datetime.fromtimestamp(changed, UTC), zone)
            at = datetime.fromtimestamp(changed, UTC)
        else:
            at = probe
    return [*spans, OffsetSpan(None, offset)]


class LocalDayBin(Func):
    """The number of the run of ``days`` local days (counted from ``LOCAL_EPOCH`` in the
    farm's zone) a time falls in, floored to a multiple of ``days``: the time's epoch seconds
    plus the zone's offset at that instant (``offset_spans`` over the window), in whole days.
    The SQL holds only integers computed here."""

    output_field = IntegerField()

    def __init__(self, expression: Any, *, days: int, spans: list[OffsetSpan]) -> None:
        super().__init__(expression)
        self.days = int(days)
        self.spans = spans

    def as_sql(self, *args: Any, **kwargs: Any) -> Any:
        raise NotSupportedError("LocalDayBin is written for PostgreSQL and SQLite")

    def _binned(self, epoch: str, params: list[Any]) -> Any:
        """The SQL over ``epoch`` (the time's epoch seconds, written with ``params``)."""
        *changes, last = self.spans
        offset = str(last.offset_s)
        if changes:
            whens = " ".join(f"WHEN {epoch} < {s.until} THEN {s.offset_s}" for s in changes)
            offset = f"CASE {whens} ELSE {offset} END"
        local = f"({epoch} + {offset})"
        day = f"(({local} - (({local} %% {DAY_S}) + {DAY_S}) %% {DAY_S}) / {DAY_S})"
        n = self.days
        binned = f"({day} - (({day} %% {n}) + {n}) %% {n})"
        return binned, params * binned.count(epoch)

    def as_postgresql(self, compiler: SQLCompiler, connection: Any, **extra: Any) -> Any:
        sql, params = compiler.compile(self.source_expressions[0])
        return self._binned(f"CAST(floor(extract(epoch FROM {sql})) AS bigint)", list(params))

    def as_sqlite(self, compiler: SQLCompiler, connection: Any, **extra: Any) -> Any:
        sql, params = compiler.compile(self.source_expressions[0])
        return self._binned(f"CAST(strftime('%%s', {sql}) AS INTEGER)", list(params))


def _binned(column: str, window: SeriesWindow) -> Func:
    """``column``'s bucket in SQL: a UTC bucket's start, or a local day's number."""
    if not window.local_days:
        return TimeBin(column, bucket_s=window.bucket_s)
    spans = offset_spans(window.start, window.end, window.time_zone)
    return LocalDayBin(column, days=window.bucket_s // DAY_S, spans=spans)


def _bucket_start(binned: Any, window: SeriesWindow) -> datetime:
    if window.local_days:
        return _day_start(int(binned), window.time_zone)
    start: datetime = binned
    return start


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
        readings.annotate(t=_binned("message_ts", window))
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
        SeriesPoint(
            _bucket_start(g["t"], window),
            g["low"],
            g["high"],
            g["mean"],
            last[g["last_at"]],
            g["n"],
        )
        for g in groups
    ]


def _from_rollups(endpoint_id: int, window: SeriesWindow) -> list[SeriesPoint]:
    """Hours merged exactly: lowest of the lows, highest of the highs, summed sums and
    counts, and the last reading of the hour whose last reading is latest."""
    hours = TelemetryRollup.objects.filter(
        endpoint_id=endpoint_id, hour__gte=window.start, hour__lt=window.end
    ).annotate(t=_binned("hour", window))
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
        SeriesPoint(
            _bucket_start(g["t"], window),
            g["low"],
            g["high"],
            g["total"] / g["n"],
            last[g["latest"]],
            g["n"],
        )
        for g in groups
    ]
