"""One distributed run: check the servers, migrate, seed, start the stack, run the chosen
phases, print their tables and write the JSON; the stack stopped and every row the run
created deleted on the way out, also when it fails or is interrupted."""

from __future__ import annotations

import io
import json
import os
import platform
import uuid
from collections.abc import Callable
from contextlib import ExitStack
from typing import Any

from django.conf import settings
from django.core.management import call_command
from django.db import connection

from config.env import MqttConfig
from devtools.bench import BenchError
from devtools.bench.distributed.command_phase import command_phase
from devtools.bench.distributed.cost import cost_table, crossing_cpu_table
from devtools.bench.distributed.ingest_phase import IngestFigures, ingest_phase
from devtools.bench.distributed.plan import DistributedPlan
from devtools.bench.distributed.profile import profiles_recording, py_spy
from devtools.bench.distributed.results import (
    StepResult,
    document,
    load_table,
    stages_table,
    steps_table,
)
from devtools.bench.distributed.scheduler_phase import (
    SchedulerFigures,
    scheduler_phase,
    scheduler_skip_reason,
)
from devtools.bench.distributed.stack import stack_running
from devtools.bench.distributed.targets import target_rows, targets_table
from devtools.bench.distributed.task_counts import task_counts_table
from devtools.bench.distributed.where import profiles_table
from devtools.bench.fleet import fleet_seeded
from devtools.bench.storage import storage_bench

Write = Callable[[str], None]


def servers_check() -> None:
    """The bench measures the deployment's servers: it refuses the embedded defaults."""
    mqtt: MqttConfig = settings.MQTT
    missing = []
    if connection.vendor != "postgresql":
        missing.append("DATABASE_URL (postgres://)")
    if settings.CELERY_BROKER_EMBEDDED:
        missing.append("CELERY_BROKER_URL")
    if mqtt.embedded:
        missing.append("MQTT_URL")
    if missing:
        raise BenchError(
            "bench --distributed runs the deployed processes against real servers; set "
            + ", ".join(missing)
        )


def distributed_run(plan: DistributedPlan, write: Write) -> None:
    servers_check()
    if plan.profile:
        py_spy()  # fail before anything starts
    run = uuid.uuid4().hex[:8]
    out = plan.out_dir / run
    out.mkdir(parents=True, exist_ok=True)
    write(f"command: {plan.command_line()}")
    write(machine_describe())
    write("setup: migrate, sync_beat_schedule")
    call_command("migrate", interactive=False, verbosity=0)
    call_command("sync_beat_schedule", stdout=io.StringIO())
    steps: list[StepResult] = []
    extra: dict[str, Any] = {"run": run}
    skip = scheduler_skip_reason() if "scheduler" in plan.phases else None
    ingest: IngestFigures | None = None
    sched: SchedulerFigures | None = None
    bytes_per_value: float | None = None
    if skip:
        write(skip)
    with ExitStack() as fleets:
        # Entered before the stack, so left after it: no worker still writes their rows.
        command_fleet = (
            fleets.enter_context(
                fleet_seeded(tag=f"{run}c", farms=plan.farms, sensors_per_farm=1, relays=True)
            )
            if "command" in plan.phases
            else None
        )
        ingest_fleet = (
            fleets.enter_context(
                fleet_seeded(
                    tag=f"{run}i", farms=1, sensors_per_farm=plan.ingest_devices, relays=False
                )
            )
            if "ingest" in plan.phases
            else None
        )
        farms = plan.farms if command_fleet else 0
        sensors = plan.ingest_devices if ingest_fleet else 0
        write(f"setup: seeded {farms:,} farms (sensor + relay, hot/cool rules) and "
              f"{sensors:,} ingest sensors")  # fmt: skip
        with stack_running(plan, run, out, write) as stack:
            if command_fleet is not None:
                with ExitStack() as profiling:
                    profiles = (
                        profiling.enter_context(
                            profiles_recording(stack, out / "profiles", plan.profile_format, write)
                        )
                        if plan.profile
                        else None
                    )
                    steps = command_phase(plan, stack, command_fleet, write)
                _command_write(steps, write)
                if profiles is not None:
                    write("\nProfiles (py-spy, command path):")
                    write("\n".join(f"  {p}" for p in profiles) or "  none written")
                    if plan.profile_format == "raw":
                        write("\nWhere each process spends its samples (py-spy, on CPU):")
                        write(profiles_table(profiles))
                    extra["profiles"] = [str(p) for p in profiles]
            if ingest_fleet is not None:
                with ExitStack() as profiling:
                    ingest_profiles = (
                        profiling.enter_context(
                            profiles_recording(
                                stack, out / "profiles-ingest", plan.profile_format, write
                            )
                        )
                        if plan.profile
                        else None
                    )
                    figures = ingest = ingest_phase(stack, ingest_fleet, plan.messages, write)
                if ingest_profiles and plan.profile_format == "raw":
                    write("\nWhere each process spends its samples during ingest (py-spy):")
                    write(profiles_table(ingest_profiles))
                write(f"\nIngest: {plan.messages:,} telemetry messages × 4 values, first publish "
                      "to persisted")  # fmt: skip
                write(figures.table())
                write("CPU % over the product path: " + _cpu_line(figures.cpu))
                extra["ingest"] = figures.as_json()
            if "scheduler" in plan.phases and not skip:
                sched = scheduler_phase(stack, plan.scheduler_rows, plan.scheduler_workers, write)
                write(f"\nScheduler: {plan.scheduler_rows:,} due rows drained by celery "
                      "(poll + execute tasks) vs the bare claim + finish loop (threads, one "
                      "connection each)")  # fmt: skip
                write(sched.table())
                extra["scheduler"] = sched.as_json()
    if "storage" in plan.phases:
        # After the stack stopped: VACUUM FULL takes each table's lock, and no worker writes.
        storage = storage_bench(
            devices=plan.storage_devices, messages=plan.storage_messages, batch=plan.batch
        )
        write(f"\nStorage: {plan.storage_messages:,} messages from {plan.storage_devices} sensors "
              "through ingest and evaluation, after VACUUM FULL")  # fmt: skip
        write(storage.table())
        write(storage.summary())
        bytes_per_value = storage.per_value()
        extra["storage_bytes_per_value"] = round(bytes_per_value, 1)
    rows = target_rows(steps=steps, ingest=ingest, scheduler=sched, bytes_per_value=bytes_per_value)
    write("\nTargets: each figure next to its target and the bare limit of this run")
    write(targets_table(rows))
    extra["targets"] = [
        {"figure": r.figure, "target": r.target, "measured": r.measured, "limit": r.limit,
         "met": r.met}
        for r in rows
    ]  # fmt: skip
    if plan.json_path is not None:
        plan.json_path.parent.mkdir(parents=True, exist_ok=True)
        body = document(plan.command_line(), machine_describe(), steps, extra)
        plan.json_path.write_text(json.dumps(body, indent=2, default=str) + "\n")
        write(f"\nJSON: {plan.json_path}")
    write(f"logs: {out}")
    lost = sum(s.lost for s in steps)
    if lost:
        raise BenchError(
            f"{lost:,} offered crossing(s) ended with no applied command and no explained "
            "supersede (the steps table's lost column; the run's logs may say why)"
        )


def _command_write(steps: list[StepResult], write: Write) -> None:
    write("\nCommand path: per step, latencies in ms from the reading's timestamp")
    write(steps_table(steps))
    write("\nWhere the time goes: p50/p99 ms per hop (– = the pipeline records no timestamp)")
    write(stages_table(steps))
    write("\nLoad: queue backlog at the end of each step, CPU % of one core over the step")
    write(load_table(steps))
    costs = [s.cost for s in steps if s.cost is not None]
    if costs:
        write("\nCost per command created (offer + settle, less the idle stack's own cost in as "
              "long; servers' counters, processes' CPU)")  # fmt: skip
        write(cost_table(costs))
    if any(s.tasks for s in steps):
        write("\nCelery tasks per command created, by task (the workers' own counts)")
        write(task_counts_table([(s.rate, s.tasks, s.created) for s in steps]))
    if any(s.cpu_ms for s in steps):
        write("\nCPU per crossing: ms of CPU per command created, per process and server (offer "
              "+ settle, each less its own idle cost)")  # fmt: skip
        write(crossing_cpu_table([
            (s.rate, s.cpu_ms, s.cost.per_command()["machine_cpu_ms"] if s.cost else None)
            for s in steps if s.cpu_ms
        ]))  # fmt: skip


def _cpu_line(cpu: dict[str, float]) -> str:
    return ", ".join(f"{name} {pct:.0f}" for name, pct in sorted(cpu.items()))


def machine_describe() -> str:
    version: int = getattr(connection, "pg_version", 0)
    mqtt: MqttConfig = settings.MQTT
    return (
        f"machine: {os.cpu_count()} cores, {platform.system()} {platform.machine()}, "
        f"Python {platform.python_version()}; postgresql {version // 10000}.{version % 10000}; "
        f"MQTT {mqtt.host}:{mqtt.port} (v{5 if mqtt.protocol == 5 else '3.1.1'}); "
        f"Celery broker: {settings.CELERY_BROKER_URL.split('://')[0]}; "
        "every stage a process of its own"
    )
