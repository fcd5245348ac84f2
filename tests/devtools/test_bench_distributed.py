"""The pure parts of ``bench --distributed``: option parsing, the crossing schedule, the
stage breakdown, outcome classification and the shaping of tables and JSON. The run itself
needs the real servers and is exercised by hand (``make bench-distributed``)."""

from __future__ import annotations

import json
import math
import os
import time
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from devtools.bench.distributed.cli import plan_from_options
from devtools.bench.distributed.plan import (
    PROCFILE_WORKERS,
    PlanError,
    WorkerSpec,
    numbers_parse,
    phases_parse,
    workers_parse,
)
from devtools.bench.distributed.results import (
    APPLIED,
    NOT_NEEDED,
    SUPERSEDED,
    StepResult,
    crossing_outcome,
    document,
    load_table,
    stages_table,
    steps_table,
)
from devtools.bench.distributed.schedule import step_crossings
from devtools.bench.distributed.stages import MISSING, NAMES, stage_breakdown

T0 = datetime(2025, 1, 1, tzinfo=UTC)


def at(ms: float) -> datetime:
    return T0 + timedelta(milliseconds=ms)


# -- options --------------------------------------------------------------------------


def test_workers_default_to_the_procfile_and_a_stage_keeps_its_pool_unless_named() -> None:
    workers = workers_parse("evaluate=4, dispatch=16, reconcile=3:threads")
    assert workers["evaluate"] == WorkerSpec(4, "prefork")
    assert workers["dispatch"] == WorkerSpec(16, "threads")  # the Procfile's pool
    assert workers["reconcile"] == WorkerSpec(3, "threads")
    assert workers["events"] == PROCFILE_WORKERS["events"]
    assert workers_parse("") == PROCFILE_WORKERS
    assert "ingest" not in PROCFILE_WORKERS  # the bridge commits: no ingest worker


@pytest.mark.parametrize(
    "spec", ["evaluate", "nope=2", "ingest=2", "evaluate=x", "evaluate=0", "evaluate=2:fork"]
)
def test_a_malformed_worker_spec_names_the_option(spec: str) -> None:
    with pytest.raises(PlanError, match="--concurrency"):
        workers_parse(spec)


def test_numbers_and_phases() -> None:
    assert numbers_parse("--steps", "10, 30,100") == (10.0, 30.0, 100.0)
    assert numbers_parse("--workers", "1,2,4", integer=True) == (1, 2, 4)
    for bad in ("", "1,x", "0,3"):
        with pytest.raises(PlanError, match="--steps"):
            numbers_parse("--steps", bad)
    assert phases_parse("scheduler, command") == frozenset({"scheduler", "command"})
    with pytest.raises(PlanError, match="--only"):
        phases_parse("command,bogus")


def _options(**given: object) -> dict[str, object]:
    opts: dict[str, object] = {
        "farms": None, "messages": None, "devices": None, "rows": None, "workers": "1,2,4",
        "only": "ingest,command,scheduler", "bridges": 1, "concurrency": "", "steps": "10,30",
        "step_seconds": 20.0, "settle_seconds": 90.0, "out": Path("out"), "json": None,
        "profile": False, "profile_format": "svg",
    }  # fmt: skip
    return opts | given


def test_unset_shared_options_take_the_distributed_defaults() -> None:
    plan = plan_from_options(_options(farms=50, concurrency="evaluate=3"))
    assert (plan.farms, plan.messages, plan.ingest_devices) == (50, 20_000, 1000)
    assert plan.steps == (10.0, 30.0) and plan.scheduler_workers == (1, 2, 4)
    assert plan.stage_workers["evaluate"] == WorkerSpec(3)
    line = plan.command_line()
    assert "--farms 50" in line and "--steps 10,30" in line and "evaluate=3:prefork" in line
    with pytest.raises(PlanError):
        plan_from_options(_options(bridges=0))


# -- schedule ---------------------------------------------------------------------------


def test_crossings_go_round_robin_and_alternate_per_farm_across_steps() -> None:
    first = step_crossings(step=1, rate=2, seconds=2, farms=3, first_index=0)
    second = step_crossings(step=2, rate=4, seconds=1, farms=3, first_index=len(first))
    assert [c.farm for c in first + second] == [0, 1, 2, 0, 1, 2, 0, 1]
    assert [c.offset_s for c in first] == [0, 0.5, 1.0, 1.5]
    assert [c.offset_s for c in second] == [0, 0.25, 0.5, 0.75]
    by_farm: dict[int, list[bool]] = {}
    for c in first + second:
        by_farm.setdefault(c.farm, []).append(c.hot)
    assert by_farm == {0: [True, False, True], 1: [True, False, True], 2: [True, False]}


# -- stage breakdown --------------------------------------------------------------------


def test_a_hop_starts_at_the_nearest_recorded_moment_and_an_unrecorded_one_is_missing() -> None:
    timeline = ("reading", "received", "handed_off", "stored", "applied")
    samples = [
        {"reading": at(0), "received": at(2), "stored": at(12), "applied": at(40)},
        {"reading": at(0), "received": at(4), "stored": at(24), "applied": None},
    ]
    hops = stage_breakdown(samples, timeline)
    assert [(h.start, h.end) for h in hops] == [
        ("reading", "received"),
        (None, "handed_off"),
        ("received", "stored"),
        ("stored", "applied"),
    ]
    assert hops[0].ms == (2.0, 4.0) and hops[2].ms == (10.0, 20.0) and hops[3].ms == (28.0,)
    assert hops[1].cells() == ("handed_off (not recorded)", 0, MISSING, MISSING)
    assert hops[1].as_json()["p50_ms"] is None and hops[3].as_json()["p99_ms"] == 28.0


def test_the_timeline_starts_at_the_reading_and_ends_applied() -> None:
    assert NAMES[0] == "reading" and NAMES[-1] == "applied" and len(set(NAMES)) == len(NAMES)


# -- outcomes ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "outcome"),
    [
        ({"event_status": None}, "lost: no event stored"),
        ({"event_status": "discarded", "event_reason": "newer_reading"}, SUPERSEDED),
        ({"event_status": "pending"}, "lost: event pending"),
        ({"event_status": "processed", "execution": "already_in_state"}, NOT_NEEDED),
        ({"event_status": "processed", "execution": "already_pending"}, NOT_NEEDED),
        ({"event_status": "processed", "execution": "suppressed"}, "lost: execution suppressed"),
        ({"event_status": "processed", "execution": "intent_created", "command_status": "applied"},
         APPLIED),
        ({"event_status": "processed", "execution": "intent_created", "command_status": "expired",
          "command_reason": "superseded"}, SUPERSEDED),
        ({"event_status": "processed", "execution": "intent_created",
          "command_status": "dispatched"}, "lost: command still dispatched"),
        ({"event_status": "processed", "execution": "intent_created", "command_status": "failed",
          "command_reason": "ack_timeout"}, "lost: command failed/ack_timeout"),
    ],
)  # fmt: skip
def test_each_crossing_is_applied_superseded_not_needed_or_lost(
    kwargs: dict[str, str], outcome: str
) -> None:
    assert crossing_outcome(**kwargs) == outcome  # type: ignore[arg-type]


# -- tables and JSON --------------------------------------------------------------------


def _step(rate: float, **outcomes: int) -> StepResult:
    result = StepResult(step=1, rate=rate, seconds=20.0, offered=sum(outcomes.values()))
    result.outcomes = Counter({k.replace("_", " "): v for k, v in outcomes.items()})
    result.outcomes["lost: no event stored"] = result.outcomes.pop("lost", 0)
    result.created, result.reached = 3, 3
    result.to_rpc_ms = [10.0, 20.0, 30.0]
    result.hops = stage_breakdown([{"reading": at(0), "bridge_received": at(1), "applied": at(9)}])
    result.backlog = {"ingest": 0, "evaluate": 7}
    result.cpu = {"bridge-0": 12.34, "evaluate": 180.0}
    return result


def test_steps_table_counts_lost_and_prints_missing_latencies_as_a_dash() -> None:
    step = _step(30, applied=3, superseded=1, not_needed=1, lost=2)
    assert step.lost == 2 and step.lost_reasons() == "no event stored 2"
    table = steps_table([step])
    header, _, row = table.splitlines()
    assert "offered/s" in header and "→applied p99" in header
    assert row.split()[:8] == ["30/s", "7", "3", "3", "3", "1", "1", "2"]
    assert row.split()[8:11] == ["20.00", "30.00", "30.00"] and row.split()[-1] == MISSING


def test_stage_and_load_tables_have_a_column_per_step() -> None:
    steps = [_step(10, applied=3), _step(30, applied=3)]
    stages = stages_table(steps)
    assert "10/s p50" in stages and "30/s p99" in stages
    assert "ingest_committed (not recorded)" in stages
    load = load_table(steps)
    assert "evaluate queue" in load and "bridge-0 cpu%" in load
    assert load.splitlines()[2].split() == ["10/s", "7", "0", "12", "180"]


def test_the_json_document_is_serialisable_and_holds_every_step() -> None:
    body = document("manage.py bench --distributed", "machine", [_step(10, applied=3)], {"x": 1})
    text = json.loads(json.dumps(body))
    step = text["steps"][0]
    assert text["x"] == 1 and step["applied"] == 3 and step["lost"] == 0
    assert step["reading_to_rpc"] == {"p50_ms": 20.0, "p95_ms": 30.0, "p99_ms": 30.0}
    assert step["reading_to_applied"]["p50_ms"] is None
    assert {"from": "bridge_received", "to": "applied"} in [
        {"from": s["from"], "to": s["to"]} for s in step["stages"] if s["samples"]
    ]
    assert not any(math.isnan(v) for v in step["cpu_percent"].values())


def test_cost_per_command_divides_each_counter_and_prints_the_spread_across_steps() -> None:
    from devtools.bench.distributed.cost import Counters, StepCost, cost_table

    def spent(tx: int, cpu_s: float, broker: int | None = 900) -> Counters:
        return Counters(tx, tx * 10, broker, cpu_s, cpu_s * 2, 25.0)

    low = StepCost(10, 300, 100, spent(3_000, 2.0))
    high = StepCost(300, 3000, 1_000, spent(36_000, 24.0, None))
    assert low.per_command() == {
        "pg_transactions": 30.0, "pg_rows_read": 300.0, "broker_commands": 9.0,
        "process_cpu_ms": 20.0, "machine_cpu_ms": 40.0,
    }  # fmt: skip
    assert high.per_command()["broker_commands"] is None  # a broker other than Redis
    rows = cost_table([low, high]).splitlines()
    assert rows[2].split() == ["300", "10/s", "100", "30.0", "300", "9.0", "20.0", "40.0"]
    assert rows[3].split()[:3] == ["3,000", "300/s", "1,000"] and rows[3].split()[5] == "–"
    assert rows[4].split() == ["max/min", "1.20×", "1.20×", "1.00×", "1.20×", "1.20×"]
    assert json.loads(json.dumps(high.as_json()))["per_command"]["pg_transactions"] == 36.0
    # The idle stack's own cost in as long is the clock's, not the commands': it is taken off.
    idle = Counters(100, 1_000, 50, 0.4, 0.8, 5.0)  # 5 s idle; the step took 25 s
    net = StepCost(10, 300, 100, spent(3_000, 2.0), idle).per_command()
    assert net["pg_transactions"] == 25.0 and net["broker_commands"] == 6.5
    assert net["process_cpu_ms"] == pytest.approx(0.0)
    later = Counters(10, 20, 30, 1.5, 3.0, 9.0)
    assert later - Counters(4, 5, None, 0.5, 1.0, 4.0) == Counters(6, 15, None, 1.0, 2.0, 5.0)


def test_cpu_per_crossing_is_each_process_time_per_command_less_its_idle_share() -> None:
    from devtools.bench.distributed.cost import cpu_per_command, crossing_cpu_table
    from devtools.bench.distributed.procs import CpuMeter

    meter = CpuMeter({"bench": os.getpid()})
    deadline = time.process_time() + 0.2
    while time.process_time() < deadline:  # burn 0.2 s of this process's CPU
        pass
    used = meter.used_s()["bench"]
    assert used >= 0.15  # psutil counts in clock ticks
    assert cpu_per_command(meter, {}, 10)["bench"] == pytest.approx(used * 100, abs=2)
    assert cpu_per_command(meter, {"bench": 100.0 * 1_000}, 10) == {"bench": 0.0}
    table = crossing_cpu_table(
        [(1, {"ingest": 30.0, "reconcile": 20.5}, 90.0), (10, {"ingest": 20.0}, None)]
    ).splitlines()
    assert table[0].split() == ["process", "1/s", "ms", "10/s", "ms"]
    assert table[2].split() == ["ingest", "30.0", "20.0"]
    assert table[3].split() == ["reconcile", "20.5", "–"]
    assert table[4].split() == ["stack", "and", "servers", "50.5", "20.0"]
    assert table[5].split() == ["machine", "(every", "core)", "90.0", "–"]


def test_profile_samples_are_sorted_into_kinds_by_the_first_kind_their_stack_touches() -> None:
    from devtools.bench.distributed.where import profile_shares

    lines = [
        "main (celery/worker.py:1);execute (django/db/models/sql/compiler.py:9);"
        "wait (psycopg/waiting.py:3) 30",
        "main (celery/worker.py:1);evaluate (automation/services/evaluate.py:5) 10",
        "main (celery/worker.py:1);loads (json/decoder.py:2) 5",
        "garbage line",
    ]
    total, shares = profile_shares(lines)
    assert total == 45
    assert shares == {"PostgreSQL I/O": 30, "JSON": 5, "product code": 10}


def test_the_bench_starts_each_stage_as_the_development_procfile_does() -> None:
    import re
    from pathlib import Path

    from devtools.bench.distributed.plan import PROCFILE_WORKERS

    procfile = (Path(__file__).resolve().parents[2] / "deploy" / "Procfile.dev").read_text()
    for stage, spec in PROCFILE_WORKERS.items():
        line = next(x for x in procfile.splitlines() if x.startswith(f"{stage}:"))
        concurrency = int(re.search(r"--concurrency (\d+)", line).group(1))  # type: ignore[union-attr]
        pool = "threads" if "--pool threads" in line else "prefork"
        assert (spec.concurrency, spec.pool) == (concurrency, pool), stage


def test_the_ingest_table_gives_values_per_second_next_to_each_bare_ratio() -> None:
    from devtools.bench.distributed.ingest_phase import PRODUCT, IngestFigures
    from devtools.bench.ingest import BARE_PAHO

    figures = IngestFigures(20_000, seconds={PRODUCT: 10.0, BARE_PAHO: 5.0})
    lines = figures.table().splitlines()
    assert lines[2].split()[-1] == "0.50×"
    assert lines[-1] == "product: 8,000 values/s (4 values a message)"
    assert figures.as_json()["product_values_per_s"] == 8_000.0


@pytest.mark.postgres
@pytest.mark.django_db
def test_the_benchs_own_database_backend_is_not_charged_to_the_stack() -> None:
    """The settle polls run on the bench's connection: the server's CPU for them is the
    bench's, so the meter that includes PostgreSQL leaves that backend out."""
    from django.db import connection

    from devtools.bench.distributed.procs import bench_backends

    with connection.cursor() as cur:
        cur.execute("SELECT pg_backend_pid()")
        (own,) = cur.fetchone()
    assert own in bench_backends()
