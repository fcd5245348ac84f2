"""Whether a soak's figures stay flat: a least-squares line through each series' samples in
the fitted window (the last 40 minutes, or the last two thirds of a run shorter than an
hour, so warm-up and the first retention period are left out), and a verdict per series.

A series rises when its slope times the window's length exceeds its tolerance, the larger of
a share of its mean over the window and an absolute floor below which a change is noise (a
p99 of a few hundred crossings moves by tens of ms from interval to interval; an
allocator's arenas by megabytes). Falling or flat is fine. Pure: the samples come in."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from config.tables import format_table

WINDOW_S = 40 * 60.0  # fitted window of a run of an hour or more
SHORT_RUN_S = 3600.0
SHORT_RUN_SHARE = 2 / 3  # shorter runs: their last two thirds
MIN_POINTS = 3  # fewer samples in the window: no verdict
OK, RISING, UNJUDGED = "ok", "FAIL (rising)", "– (too few samples)"
NOT_JUDGED = "shown, not judged"  # a server's memory: its caches warm over the run
MIB = 1024 * 1024


@dataclass(frozen=True)
class Tolerance:
    """How much a series may rise over the window: ``max(share × |mean|, floor)``."""

    share: float
    floor: float
    unit: str

    def of(self, mean: float) -> float:
        return max(self.share * abs(mean), self.floor)

    def describe(self) -> str:
        return f"max({self.share:.0%} of mean, {self.floor:g} {self.unit})"


# Chosen for the 2-core development machine; docs/benchmarks.md, "A long run (soak)", says why.
LATENCY = Tolerance(0.30, 100.0, "ms")
RSS = Tolerance(0.05, 8.0, "MiB")
TABLE_BYTES = Tolerance(0.20, 1.0, "MiB")


@dataclass
class Series:
    """One figure over the run: (seconds since the start, value) in ``tolerance.unit``."""

    name: str
    tolerance: Tolerance
    judged: bool = True
    points: list[tuple[float, float]] = field(default_factory=list)

    def add(self, t_s: float, value: float | None) -> None:
        if value is not None and math.isfinite(value):
            self.points.append((t_s, value))


def window_start(first_s: float, last_s: float) -> float:
    """Where the fitted window starts, for a run sampled from ``first_s`` to ``last_s``."""
    duration = last_s - first_s
    length = WINDOW_S if duration >= SHORT_RUN_S else duration * SHORT_RUN_SHARE
    return last_s - length


def slope(points: Sequence[tuple[float, float]]) -> float:
    """Least-squares slope per second; 0 for fewer than two distinct times."""
    n = len(points)
    if n < 2:
        return 0.0
    mean_t = sum(t for t, _ in points) / n
    mean_v = sum(v for _, v in points) / n
    spread = sum((t - mean_t) ** 2 for t, _ in points)
    if spread == 0:
        return 0.0
    return sum((t - mean_t) * (v - mean_v) for t, v in points) / spread


@dataclass(frozen=True)
class Trend:
    name: str
    unit: str
    rule: str  # the tolerance as a rule
    points: int
    start: float
    end: float
    mean: float
    per_hour: float  # slope
    rise: float  # slope × the window's length
    tolerance: float
    verdict: str

    @property
    def failed(self) -> bool:
        return self.verdict == RISING

    def row(self) -> tuple[object, ...]:
        def cell(value: float) -> object:
            return "–" if math.isnan(value) else round(value, 2)

        return (
            f"{self.name} ({self.unit})", self.points, cell(self.start), cell(self.end),
            f"{self.per_hour:+,.2f}", f"{self.rise:+,.2f}",
            f"{cell(self.tolerance)} = {self.rule}", self.verdict,
        )  # fmt: skip

    def as_json(self) -> dict[str, Any]:
        def number(value: float) -> float | None:
            return None if math.isnan(value) else round(value, 4)

        return {
            "series": self.name, "unit": self.unit, "points": self.points,
            "start": number(self.start), "end": number(self.end), "mean": number(self.mean),
            "slope_per_hour": number(self.per_hour), "rise_over_window": number(self.rise),
            "tolerance": number(self.tolerance), "rule": self.rule, "verdict": self.verdict,
        }  # fmt: skip


def trend_fit(series: Series, since_s: float) -> Trend:
    """The series' line over its samples from ``since_s`` on, and whether it rises."""
    points = [(t, v) for t, v in series.points if t >= since_s]
    tol = series.tolerance
    if len(points) < MIN_POINTS:
        nan = math.nan
        return Trend(series.name, tol.unit, tol.describe(), len(points), nan, nan, nan, nan, nan,
                     nan, UNJUDGED)  # fmt: skip
    per_s = slope(points)
    length = points[-1][0] - points[0][0]
    mean = sum(v for _, v in points) / len(points)
    rise = per_s * length
    tolerance = tol.of(mean)
    verdict = RISING if rise > tolerance else OK
    if not series.judged:
        verdict = NOT_JUDGED
    return Trend(series.name, tol.unit, tol.describe(), len(points), points[0][1], points[-1][1],
                 mean, per_s * 3600, rise, tolerance, verdict)  # fmt: skip


def trends_fit(series: Sequence[Series]) -> list[Trend]:
    """Every series fitted over the same window, set by the run's first and last samples."""
    times = [t for s in series for t, _ in s.points]
    if not times:
        return []
    since = window_start(min(times), max(times))
    return [trend_fit(s, since) for s in series]


TREND_HEADERS = [
    "series", "samples", "start", "end", "slope /h", "rise over window", "tolerance",
    "verdict",
]  # fmt: skip


def trends_table(trends: Sequence[Trend]) -> str:
    return format_table(TREND_HEADERS, [t.row() for t in trends])
