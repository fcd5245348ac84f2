"""The bench's targets table: each figure against its target and the same run's bare limit,
a missed target said as missed, and a phase left out said as not run (never as met)."""

from __future__ import annotations

from collections import Counter

from config.task_names import COMMANDS_DISPATCH, COMMANDS_RECONCILE, EVENTS_EVALUATE
from devtools.bench.distributed.cost import Counters, StepCost
from devtools.bench.distributed.ingest_phase import PRODUCT, IngestFigures
from devtools.bench.distributed.results import APPLIED, StepResult
from devtools.bench.distributed.scheduler_phase import SchedulerFigures
from devtools.bench.distributed.targets import target_rows, targets_table
from devtools.bench.distributed.task_counts import (
    BACKGROUND,
    per_crossing,
    task_counts_table,
    tasks_between,
)
from devtools.bench.ingest import BARE_PAHO


def _step(
    rate: float,
    p99_ms: float,
    *,
    lost: int = 0,
    machine_cpu_s: float = 1.0,
    tasks: dict[str, int] | None = None,
) -> StepResult:
    outcomes = Counter({APPLIED: 100 - lost})
    if lost:
        outcomes["lost: command still dispatched"] = lost
    spent = Counters(1_000, 10_000, 2_000, machine_cpu_s / 2, machine_cpu_s, 20.0)
    return StepResult(
        step=1,
        rate=rate,
        seconds=10.0,
        offered=100,
        outcomes=outcomes,
        created=100,
        to_rpc_ms=[p99_ms / 2] * 98 + [p99_ms] * 2,
        cost=StepCost(rate, 300, 100, spent),
        cpu_ms={"ingest": 9.0, "postgresql": 4.0, "bridge": 1.0, "bench": 30.0},
        tasks=tasks or {},
    )


# A crossing of four tasks (two reconciles), and beat's sweeps beside them.
FOUR = {EVENTS_EVALUATE: 100, COMMANDS_DISPATCH: 100, COMMANDS_RECONCILE: 200, "sweep": 7}


def test_each_figure_is_measured_against_its_target_and_the_bare_limit() -> None:
    ingest = IngestFigures(messages=20_000, seconds={PRODUCT: 4.0, BARE_PAHO: 3.0})
    scheduler = SchedulerFigures(rows=5_000)
    scheduler.runs.append((4, 2.0, 1.0, {"completed": 5_000}))
    rows = target_rows(
        steps=[
            _step(10, 40, machine_cpu_s=1.5, tasks=FOUR),
            _step(100, 90),
            _step(300, 80, lost=1),
        ],
        ingest=ingest,
        scheduler=scheduler,
        bytes_per_value=160.0,
    )
    verdicts = {r.figure: r.met for r in rows}
    assert verdicts == {
        "machine CPU per crossing at 10/s": True,  # 15 ms for each of 100 commands
        "Celery tasks per crossing at 10/s": False,  # 4, the sweeps not counted
        "p99 reading → RPC request at 100/s": True,
        "p99 reading → RPC request at 300/s": False,  # fast, but one crossing was lost
        "ingest end to end (4 values a message)": True,  # 5,000 of 6,667 msg/s: 0.75×
        "bytes per stored value (after VACUUM FULL)": False,
        "scheduler claim + execute, 4 processes": True,  # 2,500 rows/s
    }
    by_figure = {r.figure: r for r in rows}
    assert by_figure["machine CPU per crossing at 10/s"].measured.startswith("15.0 ms (ingest 9")
    assert by_figure["ingest end to end (4 values a message)"].limit == (
        "bare paho QoS 1: 6,667 msg/s"
    )
    assert "bare SKIP LOCKED loop: 5,000 rows/s" in targets_table(rows)
    assert by_figure["Celery tasks per crossing at 10/s"].measured == (
        "4.00, 20 broker commands"  # 2,000 broker commands over 100 commands
    )
    assert targets_table(rows).endswith("missed: 3 of 7 measured")


def test_a_phase_left_out_is_not_run_and_never_met() -> None:
    rows = target_rows(steps=[_step(10, 40)], ingest=None, scheduler=None, bytes_per_value=None)
    assert [r.met for r in rows] == [True, None, None, None, None, None, None]
    assert sum("not run" in line for line in targets_table(rows).splitlines()) == 6
    assert targets_table(rows).endswith("every measured target met")


def test_tasks_are_counted_per_crossing_by_name_and_the_sweeps_apart() -> None:
    before = Counter({EVENTS_EVALUATE: 10, "sweep": 3})
    after = Counter({EVENTS_EVALUATE: 110, COMMANDS_DISPATCH: 100, COMMANDS_RECONCILE: 200})
    after["sweep"] = 10
    ran = tasks_between(before, after)
    assert ran == FOUR
    assert tasks_between(None, after) == {}  # a worker that did not answer: not measured
    per = per_crossing(ran, 100)
    assert per == {EVENTS_EVALUATE: 1.0, COMMANDS_DISPATCH: 1.0, COMMANDS_RECONCILE: 2.0,
                   BACKGROUND: 0.07}  # fmt: skip
    table = task_counts_table([(10.0, ran, 100)])
    assert table.splitlines()[-1].split() == ["crossing", "tasks", "4.00"]
