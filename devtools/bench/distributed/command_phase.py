"""The command path under load: threshold crossings offered in steps of rising rate, each
step measured on its own crossings once they settled, so one step's backlog is not charged
to the next step's latencies (it shows in the backlog column instead)."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime

from django.db import transaction

from devices.models import Device
from devices.services.health import devices_heard_from
from devtools.bench.distributed.accounting import sensor_ids, step_account, step_settle
from devtools.bench.distributed.broker import queue_backlog
from devtools.bench.distributed.cost import (
    Counters,
    StepCost,
    counters_read,
    cpu_per_command,
    own_transactions,
    vacuum_when_autovacuum_is_off,
)
from devtools.bench.distributed.devices import TimedSimulator, crossings_offer
from devtools.bench.distributed.plan import STAGES, DistributedPlan
from devtools.bench.distributed.procs import CpuMeter
from devtools.bench.distributed.results import APPLIED, StepResult
from devtools.bench.distributed.schedule import step_crossings
from devtools.bench.distributed.soak_sample import server_pids
from devtools.bench.distributed.stack import Stack
from devtools.bench.distributed.task_counts import tasks_between, tasks_run
from devtools.bench.distributed.warmup import fleet_online
from devtools.bench.fleet import BenchFleet

Write = Callable[[str], None]
IDLE_S = 30.0  # a quiet stack's sweeps run every 1–10 s: a few of each


def idle_describe(idle: Counters, cpu: dict[str, float]) -> str:
    """The quiet stack's cost: its processes and servers, and the machine's busy time (which
    counts every other process of the machine too)."""
    machine = cpu.get(CpuMeter.MACHINE, 0.0) * (os.cpu_count() or 1)
    per_s = max(idle.at, 1e-6)
    broker = "–" if idle.broker_commands is None else f"{idle.broker_commands / per_s:.1f}"
    busiest = sorted(
        ((name, pct) for name, pct in cpu.items() if name != CpuMeter.MACHINE),
        key=lambda item: -item[1],
    )
    stack = sum(pct for _, pct in busiest)
    return (
        f"idle stack: {stack:.1f} % of one core in its processes and servers (the machine "
        f"{machine:.1f} %, whatever else runs on it included); PostgreSQL "
        f"{idle.pg_transactions / per_s:.1f} transactions/s, broker {broker} commands/s; "
        "per process (% of one core): " + ", ".join(f"{n} {p:.1f}" for n, p in busiest)
    )


def command_phase(
    plan: DistributedPlan, stack: Stack, fleet: BenchFleet, write: Write
) -> list[StepResult]:
    devices = sensor_ids(fleet)
    relays = dict(
        Device.objects.filter(serial_number__in=fleet.relays).values_list("serial_number", "pk")
    )
    simulator = TimedSimulator(fleet, stack.mqtt)
    results: list[StepResult] = []
    simulator.start()
    try:
        if vacuum_when_autovacuum_is_off():
            write("command path: autovacuum is off on this server: VACUUM ANALYZE before "
                  "each step, as a deployment's autovacuum would keep up")  # fmt: skip
        fleet_online(stack, fleet, write)
        write(f"command path: the idle stack's own cost over {IDLE_S:g}s (subtracted per step)")
        idle_from = counters_read(stack.pids())
        idle_meter = CpuMeter(stack.pids() | server_pids(), servers=True)
        time.sleep(IDLE_S)
        idle_cpu = idle_meter.percent()
        idle = counters_read(stack.pids()) - idle_from
        write(idle_describe(idle, idle_cpu))
        index = 0
        for step, rate in enumerate(plan.steps, 1):
            # Relays count as fresh at dispatch (they send no telemetry of their own here).
            with transaction.atomic():
                devices_heard_from(device_ids=list(relays.values()), now=datetime.now(UTC))
            crossings = step_crossings(
                step=step, rate=rate, seconds=plan.step_seconds, farms=len(fleet.sensors),
                first_index=index,
            )  # fmt: skip
            index += len(crossings)
            write(f"command path: step {step}/{len(plan.steps)}, {rate:g}/s for "
                  f"{plan.step_seconds:g}s ({len(crossings):,} crossings)")  # fmt: skip
            tasks_before = tasks_run()  # before the counters: its broker traffic is not charged
            before = counters_read(stack.pids())
            meter = CpuMeter(stack.pids())
            spend = CpuMeter(
                stack.pids() | server_pids(), servers=True
            )  # offer + settle, servers too
            with own_transactions() as own:
                offered, seconds = crossings_offer(simulator, fleet, crossings, f"step {step}")
                result = StepResult(step, rate, seconds, len(offered))
                result.cpu = meter.percent()
                result.backlog = queue_backlog(STAGES)
                stack.check_alive()
                settled = step_settle(fleet, devices, offered, plan.settle_s)
            spent = counters_read(stack.pids()) - before
            spent = replace(spent, pg_transactions=spent.pg_transactions - own.count)
            result.tasks = tasks_between(tasks_before, tasks_run())
            step_account(result, offered, devices, simulator.first_seen)
            result.cost = StepCost(rate, len(fleet.sensors), result.created, spent, idle)
            result.cpu_ms = cpu_per_command(spend, idle_cpu, result.created)
            vacuum_when_autovacuum_is_off()
            results.append(result)
            write(
                f"command path: step {step} {'settled' if settled else 'NOT settled'}: "
                f"{result.offered:,} offered, {result.created:,} commands, "
                f"{result.outcomes[APPLIED]:,} applied, {result.lost:,} lost"
                + (f" ({result.lost_reasons()})" if result.lost else "")
            )
    finally:
        simulator.stop()
    return results
