"""One bench run as ``manage.py bench`` prints it: each selected phase at the base sizes and,
with a scale above 1, again at scaled sizes, then the growth table. Each size runs with a
fresh pipeline and fleet, so the scaled run does not inherit the base run's queues or rows.

Sizes that grow with the scale: ingest devices and messages, command-path farms, scheduler
rows. The command path keeps its readings and offered rate: it is a latency at a fixed
load, and what should not grow with more farms is that latency.
"""

from __future__ import annotations

import os
import platform
import sqlite3
import uuid
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass, field, replace

from django.conf import settings
from django.db import connection

from devtools.bench.command_path import CommandResult, command_bench
from devtools.bench.fleet import SENSOR_KEYS, fleet_seeded
from devtools.bench.ingest import IngestResult, ingest_bench
from devtools.bench.pipeline import WORKER_THREADS, bench_mqtt_config, pipeline_running
from devtools.bench.report import Figure, growth_table
from devtools.bench.rollout import RolloutResult, rollout_bench, rollout_describe
from devtools.bench.scheduler import (
    BENCH_NOW,
    SchedulerBench,
    SchedulerResult,
    scheduler_unavailable,
)
from devtools.embedded_broker import ensure_embedded_broker

PHASES = ("ingest", "command", "scheduler", "rollout")
Write = Callable[[str], None]


@dataclass(frozen=True)
class BenchSizes:
    devices: int
    messages: int
    farms: int
    readings: int
    rate: float
    rows: int
    finish_rows: int
    targets: int  # rollout targets the driver's waves start

    def scaled(self, factor: int) -> BenchSizes:
        return replace(
            self,
            devices=self.devices * factor,
            messages=self.messages * factor,
            farms=self.farms * factor,
            rows=self.rows * factor,
            finish_rows=self.finish_rows * factor,
            targets=self.targets * factor,
        )

    def describe(self, phases: frozenset[str]) -> str:
        parts = {
            "ingest": f"{self.devices:,} devices, {self.messages:,} messages",
            "command": f"{self.farms:,} farms, {self.readings:,} readings at {self.rate:g}/s",
            "scheduler": f"{self.rows:,} claim rows, {self.finish_rows:,} execute rows",
            "rollout": f"{self.targets:,} rollout targets",
        }
        return "; ".join(parts[p] for p in PHASES if p in phases)


@dataclass(frozen=True)
class BenchPlan:
    base: BenchSizes
    scale: int
    phases: frozenset[str]
    workers: tuple[int, ...]
    batch: int  # messages per ingest-service batch
    claim_batch: int  # scheduler rows claimed per statement
    wave_sizes: tuple[int, ...] = ()  # rollout: waves whose statements are counted (base size)

    def command_line(self) -> str:
        """The command that repeats this run with every size spelled out."""
        b = self.base
        return (
            f"manage.py bench --devices {b.devices} --messages {b.messages} --farms {b.farms}"
            f" --commands {b.readings} --rate {b.rate:g} --rows {b.rows}"
            f" --finish-rows {b.finish_rows} --targets {b.targets}"
            f" --workers {','.join(map(str, self.workers))}"
            f" --batch {self.batch} --claim-batch {self.claim_batch} --scale {self.scale}"
            f" --only {','.join(p for p in PHASES if p in self.phases)}"
        )


@dataclass
class SizeResult:
    sizes: BenchSizes
    ingest: IngestResult | None = None
    command: CommandResult | None = None
    scheduler: SchedulerResult | None = None
    rollout: RolloutResult | None = None
    figures: list[Figure] = field(default_factory=list)


def bench_run(plan: BenchPlan, write: Write) -> None:
    """Run the plan, writing each size's tables as soon as that size is done."""
    write(f"command: {plan.command_line()}")
    write(_machine())
    skipped = scheduler_unavailable() if "scheduler" in plan.phases else None
    if skipped:
        write(skipped)
    runs = [("base", plan.base)]
    if plan.scale > 1:
        runs.append((f"{plan.scale}×", plan.base.scaled(plan.scale)))
    results: list[SizeResult] = []
    for label, sizes in runs:
        write(f"\n== {label}: {sizes.describe(plan.phases)} ==")
        # The statements per wave do not depend on the size: counted once, at the base size.
        waves = plan.wave_sizes if not results else ()
        result = _size_run(plan, sizes, with_scheduler=skipped is None, wave_sizes=waves)
        _size_write(plan, result, write)
        results.append(result)
    if len(results) == 2:
        write(f"\nGrowth: base vs {plan.scale}× (cost growth 1.00× = cost per unit unchanged)")
        write(growth_table(results[0].figures, results[1].figures, plan.scale))


def _size_run(
    plan: BenchPlan, sizes: BenchSizes, *, with_scheduler: bool, wave_sizes: tuple[int, ...]
) -> SizeResult:
    result = SizeResult(sizes)
    if plan.phases & {"ingest", "command"}:
        _pipeline_phases(plan, sizes, result)
    if "scheduler" in plan.phases and with_scheduler:
        with SchedulerBench(batch=plan.claim_batch) as bench:
            result.scheduler = bench.run(
                workers=plan.workers, rows=sizes.rows, finish_rows=sizes.finish_rows, full=False
            )
    if "rollout" in plan.phases:  # after the pipeline stopped: no beat ticks its rollouts
        result.rollout = rollout_bench(targets=sizes.targets, wave_sizes=wave_sizes)
    for part in (result.ingest, result.command, result.scheduler, result.rollout):
        if part is not None:
            result.figures += part.figures()
    return result


def _pipeline_phases(plan: BenchPlan, sizes: BenchSizes, result: SizeResult) -> None:
    """Ingest and command path on one running pipeline. Fleets are seeded when their phase
    starts (relays must still count as online when commanded) and deleted only once the
    pipeline stopped, so no task of the worker still writes their rows."""
    run = uuid.uuid4().hex[:8]
    ensure_embedded_broker()
    config = bench_mqtt_config(run)
    with ExitStack() as fleets, pipeline_running(run=run, config=config) as bridge:
        if "ingest" in plan.phases:
            fleet = fleets.enter_context(
                fleet_seeded(tag=f"{run}i", farms=1, sensors_per_farm=sizes.devices, relays=False)
            )
            mqtt = (config, bridge)
            result.ingest = ingest_bench(
                fleet=fleet, count=sizes.messages, batch=plan.batch, mqtt=mqtt
            )
        if "command" in plan.phases:
            fleet = fleets.enter_context(
                fleet_seeded(tag=f"{run}c", farms=sizes.farms, sensors_per_farm=1, relays=True)
            )
            result.command = command_bench(
                fleet=fleet, readings=sizes.readings, rate=sizes.rate, config=config
            )


def _size_write(plan: BenchPlan, result: SizeResult, write: Write) -> None:
    if result.ingest is not None:
        write(
            f"\nIngest: telemetry messages ({len(SENSOR_KEYS)} values each) from first publish"
            " to persisted"
        )
        write(result.ingest.table())
    if result.command is not None:
        write("\nCommand path: from the reading's timestamp (its publish time), p50/p99")
        write(result.command.table())
        write(result.command.summary())
    if result.scheduler is not None:
        write(
            f"\nScheduler: due rows/s, workers are threads with one connection each "
            f"(claim batch {plan.claim_batch}, rows due before {BENCH_NOW.date()} via injected now)"
        )
        write(result.scheduler.table())
    if result.rollout is not None:
        write(f"\n{rollout_describe()}")
        write(result.rollout.table())
        if result.rollout.statements:
            write(
                "\nRollout driver: SQL statements of one tick per wave size (one farm, counted"
                " with CaptureQueriesContext, in this process)"
            )
            write(result.rollout.statements_table())


def _machine() -> str:
    if connection.vendor == "postgresql":
        version: int = getattr(connection, "pg_version", 0)  # e.g. 150008
        database = f"postgresql {version // 10000}.{version % 10000}"
    else:
        database = f"{connection.vendor} {sqlite3.sqlite_version}"
    mqtt = settings.MQTT
    broker = "embedded amqtt" if mqtt.embedded else "MQTT_URL"
    return (
        f"machine: {os.cpu_count()} cores, {platform.system()} {platform.machine()}, "
        f"Python {platform.python_version()}; database: {database}; "
        f"MQTT: {broker} {mqtt.host}:{mqtt.port} (v{5 if mqtt.protocol == 5 else '3.1.1'}); "
        f"Celery broker: {settings.CELERY_BROKER_URL.split('://')[0]}\n"
        f"one process (one GIL) holds the bridge, a {WORKER_THREADS}-thread worker, beat, "
        "the simulator and the bare clients; a deployment runs them as separate processes"
    )
