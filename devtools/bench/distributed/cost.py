"""What a step cost the servers and the processes, per command: PostgreSQL transactions and
rows read, Celery-broker commands (Redis), and CPU seconds of the product's processes and
of the whole machine, each read as a counter before the step and after it settled. A
deployment that spends per batch keeps these flat as the offered rate and the number of
farms grow; one that spends per command, or scans what grows, does not."""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import psutil
import redis
from django.conf import settings
from django.db import connection

from config.tables import format_table
from devtools.bench.distributed.broker import broker_kind
from devtools.bench.distributed.procs import CpuMeter, tree_cpu_s

# PostgreSQL publishes a backend's counters when it goes idle, at most once a second.
PG_STATS_FLUSH_S = 1.1


@dataclass(frozen=True)
class Counters:
    """Cumulative counters at one moment; a difference of two is what happened between."""

    pg_transactions: int
    pg_rows_read: int  # returned by scans plus fetched through indexes
    broker_commands: int | None  # None: the broker is not Redis
    process_cpu_s: float  # the stack's processes and their pools
    machine_cpu_s: float  # every core's busy time, servers included
    at: float

    def __sub__(self, before: Counters) -> Counters:
        return Counters(
            self.pg_transactions - before.pg_transactions,
            self.pg_rows_read - before.pg_rows_read,
            None
            if self.broker_commands is None or before.broker_commands is None
            else self.broker_commands - before.broker_commands,
            self.process_cpu_s - before.process_cpu_s,
            self.machine_cpu_s - before.machine_cpu_s,
            self.at - before.at,
        )


def counters_read(pids: Mapping[str, int]) -> Counters:
    """The counters now; ``pids`` are the stack's processes (the bench's own excluded)."""
    time.sleep(PG_STATS_FLUSH_S)
    with connection.cursor() as cur:
        cur.execute(
            "SELECT xact_commit + xact_rollback, tup_returned + tup_fetched "
            "FROM pg_stat_database WHERE datname = current_database()"
        )
        transactions, rows = cur.fetchone()
    cpu = psutil.cpu_times()
    idle = cpu.idle + getattr(cpu, "iowait", 0.0)
    return Counters(
        pg_transactions=int(transactions),
        pg_rows_read=int(rows),
        broker_commands=_broker_commands(),
        process_cpu_s=sum(tree_cpu_s(pid) for pid in pids.values() if pid != os.getpid()),
        machine_cpu_s=sum(cpu) - idle,
        at=time.monotonic(),
    )


def vacuum_when_autovacuum_is_off() -> bool:
    """VACUUM ANALYZE the database when the server runs no autovacuum (some development
    servers turn it off), so a run does not measure the dead rows of the runs before it: a
    deployment vacuums. True when it vacuumed."""
    with connection.cursor() as cur:
        cur.execute("SHOW autovacuum")
        (autovacuum,) = cur.fetchone()
        if autovacuum == "on":
            return False
        cur.execute("VACUUM ANALYZE")
    return True


def _broker_commands() -> int | None:
    if broker_kind() != "redis":
        return None
    client = redis.Redis.from_url(settings.CELERY_BROKER_URL)
    try:
        with contextlib.suppress(redis.RedisError):
            info: dict[str, Any] = client.info("stats")
            return int(info["total_commands_processed"])
        return None
    finally:
        client.close()


def idle_scaled(idle: Counters | None, seconds: float) -> Counters | None:
    """What the idle stack (beat's sweeps, workers' polls) spends in ``seconds``."""
    if idle is None or idle.at <= 0:
        return None
    k = seconds / idle.at
    return Counters(
        round(idle.pg_transactions * k), round(idle.pg_rows_read * k),
        None if idle.broker_commands is None else round(idle.broker_commands * k),
        idle.process_cpu_s * k, idle.machine_cpu_s * k, seconds,
    )  # fmt: skip


@dataclass(frozen=True)
class StepCost:
    """A step's counter differences over the commands it created, less what the idle stack
    spends in as long (``idle``, measured before the first step): the cost of the work,
    not of the clock."""

    rate: float
    farms: int
    commands: int
    spent: Counters
    idle: Counters | None = None

    @property
    def net(self) -> Counters:
        background = idle_scaled(self.idle, self.spent.at)
        return self.spent if background is None else self.spent - background

    def per_command(self) -> dict[str, float | None]:
        n = max(1, self.commands)
        s = self.net
        return {
            "pg_transactions": s.pg_transactions / n,
            "pg_rows_read": s.pg_rows_read / n,
            "broker_commands": None if s.broker_commands is None else s.broker_commands / n,
            "process_cpu_ms": s.process_cpu_s * 1000 / n,
            "machine_cpu_ms": s.machine_cpu_s * 1000 / n,
        }

    def as_json(self) -> dict[str, Any]:
        return {
            "commands": self.commands,
            "seconds": round(self.spent.at, 2),
            "idle_subtracted": self.idle is not None,
            "per_command": {k: _round(v) for k, v in self.per_command().items()},
        }


COST_HEADERS = [
    "farms", "offered/s", "commands", "PG transactions", "PG rows read", "broker commands",
    "process CPU ms", "machine CPU ms",
]  # fmt: skip


def cost_table(costs: Sequence[StepCost]) -> str:
    """One row per step, each figure per command created; the spread line says how far the
    largest of each column is from the smallest (flat means within ±20 %)."""
    rows: list[list[object]] = []
    for c in costs:
        per = c.per_command()
        rows.append([c.farms, f"{c.rate:g}/s", c.commands, *(_cell(v) for v in per.values())])
    keys = list(costs[0].per_command()) if costs else []
    spread: list[object] = ["", "", "max/min"]
    for key in keys:
        values = [v for c in costs if (v := c.per_command()[key]) is not None and c.commands]
        spread.append(f"{max(values) / min(values):.2f}×" if values and min(values) > 0 else "–")
    return format_table(COST_HEADERS, [*rows, spread] if costs else rows)


def cpu_per_command(
    meter: CpuMeter, idle_percent: Mapping[str, float], commands: int
) -> dict[str, float]:
    """Milliseconds of CPU per command created, per process and server, less what each spent
    idle (``idle_percent``, % of one core) in as long."""
    elapsed = meter.elapsed_s()
    n = max(1, commands)
    return {
        name: max(0.0, used - idle_percent.get(name, 0.0) / 100 * elapsed) * 1000 / n
        for name, used in meter.used_s().items()
    }


def crossing_cpu_table(steps: Sequence[tuple[float, Mapping[str, float], float | None]]) -> str:
    """A row per process, a column per step: (rate, ms per process, machine ms) each."""
    names = sorted({name for _, per, _ in steps for name in per}, key=lambda n: (n == "bench", n))
    headers = ["process", *(f"{rate:g}/s ms" for rate, _, _ in steps)]
    rows: list[list[object]] = [[name, *(_cell(per.get(name)) for _, per, _ in steps)]
                                for name in names]  # fmt: skip
    stack = [sum(v for name, v in per.items() if name != "bench") for _, per, _ in steps]
    rows.append(["stack and servers", *(_cell(v) for v in stack)])
    rows.append(["machine (every core)", *(_cell(machine) for _, _, machine in steps)])
    return format_table(headers, rows)


def _cell(value: float | None) -> object:
    if value is None:
        return "–"
    return f"{value:.1f}" if value < 100 else f"{value:,.0f}"


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 2)


@dataclass
class OwnStatements:
    count: int = 0


@contextmanager
def own_transactions() -> Iterator[OwnStatements]:
    """Count the statements the bench itself sends inside the block (its settle polls).
    Each runs in autocommit, one transaction that ``pg_stat_database`` counts with the
    stack's, so a step's transactions are the server's count less this one."""
    own = OwnStatements()

    def wrapper(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        own.count += 1
        return execute(sql, params, many, context)

    with connection.execute_wrapper(wrapper):
        yield own
