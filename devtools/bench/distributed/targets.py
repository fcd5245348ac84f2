"""The run against the hot path's targets: one row per figure the product promises (CPU and
Celery tasks per crossing, latency under load, ingest next to bare paho, bytes per stored
value, scheduler throughput), what this run measured, the bare limit measured in the same
run where one exists, and whether the target is met. A reader compares a figure with its
target and its floor in one place instead of across six tables; a phase left out of the run
shows as "not run", never as met. Pure: the figures come in already measured."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from config.tables import format_table
from devtools.bench.distributed.ingest_phase import PRODUCT, IngestFigures
from devtools.bench.distributed.results import StepResult
from devtools.bench.distributed.scheduler_phase import SchedulerFigures
from devtools.bench.distributed.task_counts import crossing_tasks
from devtools.bench.ingest import BARE_PAHO
from devtools.bench.report import percentile

CPU_RATE, CPU_MAX_MS = 10.0, 20.0
TASKS_MAX = 3.0
LATENCY_RATES, P99_MAX_MS = (100.0, 300.0), 100.0
INGEST_MIN_RATIO = 0.5
BYTES_PER_VALUE_MAX = 150.0
SCHEDULER_PROCESSES, SCHEDULER_MIN_ROWS_S = 4, 2000.0
NOT_RUN = "not run"


@dataclass(frozen=True)
class TargetRow:
    figure: str
    target: str
    measured: str
    limit: str  # the bare limit measured in the same run, or "–"
    met: bool | None  # None: the figure was not measured in this run

    def cells(self) -> list[object]:
        verdict = "–" if self.met is None else ("yes" if self.met else "NO")
        return [self.figure, self.target, self.measured, self.limit, verdict]


def _step(steps: Sequence[StepResult], rate: float) -> StepResult | None:
    return next((s for s in steps if math.isclose(s.rate, rate)), None)


def _cpu_row(steps: Sequence[StepResult]) -> TargetRow:
    figure = f"machine CPU per crossing at {CPU_RATE:g}/s"
    target = f"≤ {CPU_MAX_MS:g} ms"
    step = _step(steps, CPU_RATE)
    machine = step.cost.per_command()["machine_cpu_ms"] if step and step.cost else None
    if machine is None:
        return TargetRow(figure, target, NOT_RUN, "–", None)
    # The stack's largest shares; the bench's own process (the load) is no part of the product.
    shares = {name: ms for name, ms in (step.cpu_ms if step else {}).items() if name != "bench"}
    top = sorted(shares.items(), key=lambda kv: -kv[1])[:3]
    split = ", ".join(f"{name} {ms:.0f}" for name, ms in top)
    measured = f"{machine:.1f} ms" + (f" ({split})" if split else "")
    return TargetRow(figure, target, measured, "–", machine <= CPU_MAX_MS)


def _tasks_row(steps: Sequence[StepResult]) -> TargetRow:
    figure = f"Celery tasks per crossing at {CPU_RATE:g}/s"
    target = f"≤ {TASKS_MAX:g}"
    step = _step(steps, CPU_RATE)
    if step is None or not step.tasks:
        return TargetRow(figure, target, NOT_RUN, "–", None)
    tasks = crossing_tasks(step.tasks, step.created)
    broker = step.cost.per_command()["broker_commands"] if step.cost else None
    measured = f"{tasks:.2f}" + ("" if broker is None else f", {broker:,.0f} broker commands")
    return TargetRow(figure, target, measured, "–", tasks <= TASKS_MAX)


def _latency_row(steps: Sequence[StepResult], rate: float) -> TargetRow:
    figure = f"p99 reading → RPC request at {rate:g}/s"
    target = f"< {P99_MAX_MS:g} ms, 0 lost"
    step = _step(steps, rate)
    if step is None or not step.to_rpc_ms:
        return TargetRow(figure, target, NOT_RUN, "–", None)
    p99 = percentile(step.to_rpc_ms, 0.99)
    measured = f"{p99:,.0f} ms, {step.lost:,} lost of {step.offered:,}"
    return TargetRow(figure, target, measured, "–", p99 < P99_MAX_MS and step.lost == 0)


def _ingest_row(ingest: IngestFigures | None) -> TargetRow:
    figure = "ingest end to end (4 values a message)"
    target = f"≥ {INGEST_MIN_RATIO:g}× bare paho"
    if ingest is None or PRODUCT not in ingest.seconds or BARE_PAHO not in ingest.seconds:
        return TargetRow(figure, target, NOT_RUN, "–", None)
    product, bare = ingest.rate(PRODUCT), ingest.rate(BARE_PAHO)
    share = product / bare if bare else math.nan
    measured = f"{product:,.0f} msg/s = {share:.2f}×"
    limit = f"bare paho QoS 1: {bare:,.0f} msg/s"
    return TargetRow(figure, target, measured, limit, share >= INGEST_MIN_RATIO)


def _storage_row(bytes_per_value: float | None) -> TargetRow:
    figure = "bytes per stored value (after VACUUM FULL)"
    target = f"≤ {BYTES_PER_VALUE_MAX:g} B"
    if bytes_per_value is None:
        return TargetRow(figure, target, NOT_RUN, "–", None)
    met = bytes_per_value <= BYTES_PER_VALUE_MAX
    return TargetRow(figure, target, f"{bytes_per_value:,.0f} B", "–", met)


def _scheduler_row(scheduler: SchedulerFigures | None) -> TargetRow:
    figure = f"scheduler claim + execute, {SCHEDULER_PROCESSES} processes"
    target = f"≥ {SCHEDULER_MIN_ROWS_S:,.0f} rows/s"
    runs = [r for r in (scheduler.runs if scheduler else []) if r[0] == SCHEDULER_PROCESSES]
    if scheduler is None or not runs:
        return TargetRow(figure, target, NOT_RUN, "–", None)
    _, product_s, bare_s, _ = runs[0]
    product, bare = scheduler.rows / product_s, scheduler.rows / bare_s
    limit = f"bare SKIP LOCKED loop: {bare:,.0f} rows/s"
    met = product >= SCHEDULER_MIN_ROWS_S
    return TargetRow(figure, target, f"{product:,.0f} rows/s", limit, met)


def target_rows(
    *,
    steps: Sequence[StepResult],
    ingest: IngestFigures | None,
    scheduler: SchedulerFigures | None,
    bytes_per_value: float | None,
) -> list[TargetRow]:
    return [
        _cpu_row(steps),
        _tasks_row(steps),
        *(_latency_row(steps, rate) for rate in LATENCY_RATES),
        _ingest_row(ingest),
        _storage_row(bytes_per_value),
        _scheduler_row(scheduler),
    ]


def targets_table(rows: Sequence[TargetRow]) -> str:
    headers = ["figure", "target", "this run", "bare limit, same run", "met"]
    missed = [r.figure for r in rows if r.met is False]
    verdict = (
        f"missed: {len(missed)} of {sum(r.met is not None for r in rows)} measured"
        if missed
        else "every measured target met"
    )
    return format_table(headers, [r.cells() for r in rows]) + f"\n{verdict}"
