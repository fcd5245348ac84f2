"""The rollout driver's wave, measured in this process: ``rollout_tick`` called directly (no
worker, no beat), so the figure is the driver's own cost, not a pipeline's, and the wave's
dispatch hand-off (one task per wave) is not sent. Next to it, in the same run and on the
same rows: a bare batched INSERT of the wave's DeviceCommand rows into a twin of the ledger's
table (its indexes included) and, on PostgreSQL, a bare ``UPDATE … WHERE id IN (SELECT …
LIMIT n FOR UPDATE SKIP LOCKED)`` claim of the same targets in the same batches.

Then the statements one tick spends on a wave of 1, 10, 100 and 1,000 targets (one farm),
counted with ``CaptureQueriesContext``: constant in the wave's size (``waves.py`` is set
based). Rows are stamped with an injected ``now`` a minute apart per tick, so the rate's
sliding minute never holds the driver back. Run no beat against the same database meanwhile:
its driver would tick the bench's rollouts too."""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from unittest import mock

from django.conf import settings
from django.db import connection
from django.test.utils import CaptureQueriesContext

from config.tables import format_table
from devtools.bench import BenchError
from devtools.bench.report import Figure, Progress, ratio
from devtools.bench.rollout_bare import bare_claim_seconds, bare_insert_seconds, claim_unavailable
from devtools.bench.rollout_fleet import TICK_EVERY, relay_fleet, rollout_ramping
from rollouts import models as plan_bounds
from rollouts.services.drive import rollout_tick

WAVE_SIZES = (1, 10, 100, 1000)
FARM_RELAYS = plan_bounds.LIVE_PER_FARM_MAX  # a farm's cap never holds a wave back
DRIVER = "rollout_tick waves (in-process)"
BARE_INSERT = "bare batched INSERT (DeviceCommand rows)"
BARE_CLAIM = "bare SKIP LOCKED claim (LIMIT = wave)"
BENCH_T0 = datetime(2001, 1, 1, tzinfo=UTC)  # the injected clock's start


@dataclass
class RolloutResult:
    targets: int
    waves: list[int]  # targets started per wave
    seconds: dict[str, float] = field(default_factory=dict)  # path → seconds
    claim_skipped: str | None = None
    statements: list[tuple[int, int, float]] = field(default_factory=list)  # size, count, ms

    def rate(self, path: str) -> float:
        return self.targets / self.seconds[path] if path in self.seconds else float("nan")

    def figures(self) -> list[Figure]:
        return [Figure(f"rollout: {p}", self.rate(p), "targets/s", True) for p in self.seconds]

    def table(self) -> str:
        insert, claim = self.rate(BARE_INSERT), self.rate(BARE_CLAIM)
        rows = [
            (
                path,
                self.targets,
                len(self.waves),
                seconds,
                self.rate(path),
                ratio(self.rate(path), insert),
                ratio(self.rate(path), claim),
            )
            for path, seconds in self.seconds.items()
        ]
        headers = ["path", "targets", "batches", "seconds", "targets/s", "vs bare INSERT"]
        text = format_table([*headers, "vs bare SKIP LOCKED"], rows)
        return text + (f"\n{self.claim_skipped}" if self.claim_skipped else "")

    def statements_table(self) -> str:
        counts = {n for _, n, _ in self.statements}
        verdict = "constant in the wave's size" if len(counts) == 1 else "NOT constant"
        table = format_table(["wave size", "statements", "ms"], self.statements)
        return f"{table}\nstatements per wave: {verdict}"


def rollout_bench(*, targets: int, wave_sizes: Sequence[int]) -> RolloutResult:
    """Time the waves that start ``targets`` targets, the bare floors on the same rows, and
    (with ``wave_sizes``) count one wave's statements at each size."""
    if targets < 1:
        raise BenchError("rollout bench: --targets must be >= 1")
    tag = f"{int(time.time() * 1000) % 10**8:08d}"
    sizes = _farm_sizes(targets + 1)  # the canary's one relay on top
    with relay_fleet(f"{tag}w", sizes) as relays:
        rollout = rollout_ramping(relays, relays.farm_ids, BENCH_T0)
        seconds, waves = _driver_seconds(rollout.pk, targets)
        result = RolloutResult(targets, waves)
        result.seconds[DRIVER] = seconds
        result.seconds[BARE_INSERT] = bare_insert_seconds(rollout.pk, waves)
        result.claim_skipped = claim_unavailable()
        if result.claim_skipped is None:
            result.seconds[BARE_CLAIM] = bare_claim_seconds(rollout.pk, waves)
    if wave_sizes:
        result.statements = wave_statements(f"{tag}s", wave_sizes)
    return result


def _farm_sizes(relays: int) -> list[int]:
    full, rest = divmod(relays, FARM_RELAYS)
    return [FARM_RELAYS] * full + ([rest] if rest else [])


@contextmanager
def _no_handoff() -> Iterator[None]:
    """The wave's commands stay ``pending_dispatch``: no worker is to dispatch them, and a
    task left queued would name commands the bench deletes."""
    with mock.patch("rollouts.services.drive.hand_on_commit", lambda committed: None):
        yield


def _driver_seconds(rollout_id: int, targets: int) -> tuple[float, list[int]]:
    """Tick until every target started; the ticks that started a wave are timed."""
    progress = Progress("rollout driver")
    seconds, at = 0.0, BENCH_T0 + TICK_EVERY
    waves: list[int] = []
    with _no_handoff():
        while sum(waves) < targets:
            if len(waves) > targets:
                raise BenchError(f"rollout bench: {sum(waves)} of {targets} targets started")
            at += TICK_EVERY
            started = time.perf_counter()
            tick = rollout_tick(rollout_id, now=at)
            elapsed = time.perf_counter() - started
            if tick is None or not tick.commands:
                raise BenchError(f"rollout bench: a tick started nothing at {sum(waves)}")
            seconds += elapsed
            waves.append(len(tick.commands))
            progress.count(sum(waves), targets, "targets started")
    return seconds, waves


def wave_statements(tag: str, wave_sizes: Sequence[int]) -> list[tuple[int, int, float]]:
    """(wave size, statements, ms) of one tick starting exactly that many targets, each on a
    farm of its own (a warm-up wave of 1 first: first-use lookups are not the wave's)."""
    sizes = [1, *wave_sizes]
    rows: list[tuple[int, int, float]] = []
    with relay_fleet(tag, [n + 1 for n in sizes]) as relays, _no_handoff():
        for farm_id, n in zip(relays.farm_ids, sizes, strict=True):
            rollout = rollout_ramping(relays, [farm_id], BENCH_T0)
            with CaptureQueriesContext(connection) as queries:
                started = time.perf_counter()
                tick = rollout_tick(rollout.pk, now=BENCH_T0 + 2 * TICK_EVERY)
                elapsed = time.perf_counter() - started
            if tick is None or len(tick.commands) != n:
                got = len(tick.commands) if tick else "no tick"
                raise BenchError(f"rollout bench: a wave of {n} started {got}")
            rows.append((n, len(queries.captured_queries), round(elapsed * 1000, 1)))
    return rows[1:]


def rollout_describe() -> str:
    """The heading's account of how the figure was measured."""
    burst = plan_bounds.RATE_MAX * settings.ROLLOUTS.burst_s / 60
    return (
        "Rollout driver: targets started per second, measured in this process (the driver's"
        " own cost: rollout_tick called directly, no worker; the dispatch hand-off not sent);"
        f" canary 1, then {plan_bounds.RATE_MAX:,.0f}/min, waves of up to {burst:,.0f}"
        f" (ROLLOUT_BURST_S), {FARM_RELAYS:,} relays per farm; bare rows in the same batches"
    )
