"""A soak's figures and how they are printed: one block per interval (latencies of the
crossings accounted in it, memory and CPU per process, queue depths, each table's rows,
bytes and dead tuples), the run's series for the trend verdicts, and what a device-day and
a command cost on disk. Pure: the figures come in already measured, so the shaping is
tested without servers."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from config.tables import format_table
from devtools.bench.distributed.results import APPLIED, LOST, NOT_NEEDED, SUPERSEDED, StepResult
from devtools.bench.distributed.soak_sample import SERVERS, TableSample
from devtools.bench.distributed.trend import LATENCY, MIB, RSS, TABLE_BYTES, Series
from devtools.bench.report import percentile

MISSING = "–"
UNJUDGED_PROCS = frozenset({"bench", *SERVERS})  # shown; the soak judges the product's own


@dataclass
class Interval:
    """One interval of a soak: ``t_s`` is when it was sampled, from the start of offering."""

    index: int
    t_s: float
    seconds: float
    outcomes: Counter[str] = field(default_factory=Counter)
    offered: int = 0
    created: int = 0
    to_rpc_ms: list[float] = field(default_factory=list)
    to_applied_ms: list[float] = field(default_factory=list)
    cpu: dict[str, float] = field(default_factory=dict)  # % of one core over the interval
    rss: dict[str, int | None] = field(default_factory=dict)  # bytes
    backlog: dict[str, int] = field(default_factory=dict)
    tables: list[TableSample] = field(default_factory=list)

    def add(self, step: StepResult) -> None:
        """A batch of crossings accounted: counted in this interval."""
        self.offered += step.offered
        self.created += step.created
        self.outcomes.update(step.outcomes)
        self.to_rpc_ms += step.to_rpc_ms
        self.to_applied_ms += step.to_applied_ms

    @property
    def lost(self) -> int:
        return sum(n for o, n in self.outcomes.items() if o.startswith(LOST))

    def headline(self) -> str:
        def ms(samples: Sequence[float], q: float) -> str:
            value = percentile(samples, q)
            return MISSING if math.isnan(value) else f"{value:,.0f}"

        lost = [f"{o.removeprefix(LOST + ': ')} {n}" for o, n in sorted(self.outcomes.items())
                if o.startswith(LOST)]  # fmt: skip
        return (
            f"[{_clock(self.t_s)}] interval {self.index}: {self.offered:,} crossings offered, "
            f"{self.created:,} commands, {self.outcomes[APPLIED]:,} applied, "
            f"{self.outcomes[SUPERSEDED]:,} superseded, {self.outcomes[NOT_NEEDED]:,} not needed, "
            f"{self.lost:,} lost" + (f" ({', '.join(lost)})" if lost else "") + "\n"
            f"  reading → RPC request p50 {ms(self.to_rpc_ms, 0.5)} / p99 "
            f"{ms(self.to_rpc_ms, 0.99)} ms; reading → applied p50 {ms(self.to_applied_ms, 0.5)}"
            f" / p99 {ms(self.to_applied_ms, 0.99)} ms\n"
            "  queue depths: "
            + (", ".join(f"{q} {n:,}" for q, n in sorted(self.backlog.items())) or MISSING)
        )

    def block(self) -> str:
        """What the soak prints at the end of each interval."""
        procs = sorted(set(self.rss) | set(self.cpu), key=_process_order)
        processes = format_table(
            ["process", "RSS MiB", "CPU %"],
            [(p, _mib(self.rss.get(p)), _pct(self.cpu.get(p))) for p in procs],
        )
        tables = format_table(
            ["table", "rows", "MiB", "partitions", "dead tuples"],
            [
                (t.table, t.rows, _mib(t.bytes), t.partitions or MISSING, t.dead)
                for t in self.tables
            ],
        )
        return "\n".join([self.headline(), _indent(processes), _indent(tables)])

    def as_json(self) -> dict[str, Any]:
        def quantiles(ms: Sequence[float]) -> dict[str, float | None]:
            return {f"p{round(q * 100)}_ms": _round(percentile(ms, q)) for q in (0.5, 0.99)}

        return {
            "interval": self.index, "t_s": round(self.t_s, 1), "seconds": round(self.seconds, 1),
            "offered": self.offered, "commands_created": self.created,
            "applied": self.outcomes[APPLIED], "lost": self.lost,
            "outcomes": dict(sorted(self.outcomes.items())),
            "reading_to_rpc": quantiles(self.to_rpc_ms),
            "reading_to_applied": quantiles(self.to_applied_ms),
            "cpu_percent": {k: round(v, 1) for k, v in self.cpu.items()},
            "rss_bytes": dict(self.rss), "queue_depths": dict(self.backlog),
            "tables": [t.as_json() for t in self.tables],
        }  # fmt: skip


SUMMARY_HEADERS = [
    "at", "crossings", "commands", "applied", "lost", "→rpc p50", "→rpc p99", "→applied p50",
    "→applied p99", "table MiB", "dead tuples",
]  # fmt: skip


def summary_table(intervals: Sequence[Interval]) -> str:
    """One row per interval, for reading the run at a glance."""
    rows = []
    for i in intervals:
        cells: list[object] = [_clock(i.t_s), i.offered, i.created, i.outcomes[APPLIED], i.lost]
        for samples in (i.to_rpc_ms, i.to_applied_ms):
            cells += [_ms(percentile(samples, 0.5)), _ms(percentile(samples, 0.99))]
        cells += [_mib(sum(t.bytes for t in i.tables)), sum(t.dead for t in i.tables)]
        rows.append(cells)
    return format_table(SUMMARY_HEADERS, rows)


def soak_series(intervals: Sequence[Interval]) -> list[Series]:
    """The series the verdict judges: p99 latencies, memory per process, bytes per table.
    The baseline sample (interval 0, before any crossing) has memory and tables only."""
    rpc = Series("reading → RPC p99", LATENCY)
    applied = Series("reading → applied p99", LATENCY)
    memory: dict[str, Series] = {}
    tables: dict[str, Series] = {}
    for i in intervals:
        if i.to_rpc_ms:
            rpc.add(i.t_s, percentile(i.to_rpc_ms, 0.99))
        if i.to_applied_ms:
            applied.add(i.t_s, percentile(i.to_applied_ms, 0.99))
        for proc, rss in sorted(i.rss.items(), key=lambda kv: _process_order(kv[0])):
            series = memory.setdefault(
                proc, Series(f"RSS {proc}", RSS, judged=proc not in UNJUDGED_PROCS)
            )
            series.add(i.t_s, None if rss is None else rss / MIB)
        for t in i.tables:
            tables.setdefault(t.table, Series(f"bytes {t.table}", TABLE_BYTES)).add(
                i.t_s, t.bytes / MIB
            )
    # A table that held no row all run (no notification is sent here) says nothing.
    held = {t.table for i in intervals for t in i.tables if t.rows}
    return [rpc, applied, *memory.values(), *(s for t, s in tables.items() if t in held)]


@dataclass(frozen=True)
class StorageCost:
    """Bytes on disk per command and per device-day, from the window's samples: the tables
    hold one retention period's rows in steady state, so their bytes over the commands they
    hold is what a command costs with everything it brings (its reading, event, execution,
    transitions, receipts and the relay's report); a device-day is as many commands as the
    run's rate gives each device in a day."""

    table_bytes: float  # mean over the window, every measured table
    commands_held: float  # mean rows of the commands table over the window
    commands_per_s: float
    devices: int

    @property
    def per_command(self) -> float:
        return self.table_bytes / self.commands_held if self.commands_held else math.nan

    @property
    def per_device_day(self) -> float:
        return self.per_command * self.commands_per_s * 86_400 / max(1, self.devices)

    def lines(self) -> str:
        return (
            f"bytes per command: {_bytes(self.per_command)} ({_bytes(self.table_bytes)} held in "
            f"the measured tables over {self.commands_held:,.0f} commands held, window means)\n"
            f"bytes per device-day: {_bytes(self.per_device_day)} (at {self.commands_per_s:.2f} "
            f"commands/s over {self.devices:,} devices)"
        )

    def as_json(self) -> dict[str, float | int | None]:
        return {
            "bytes_per_command": _round(self.per_command),
            "bytes_per_device_day": _round(self.per_device_day),
            "table_bytes_mean": _round(self.table_bytes),
            "commands_held_mean": _round(self.commands_held),
            "commands_per_s": _round(self.commands_per_s),
            "devices": self.devices,
        }


def storage_cost(
    intervals: Sequence[Interval], since_s: float, commands_table: str, devices: int
) -> StorageCost:
    held = [i for i in intervals if i.t_s >= since_s and i.tables] or list(intervals[-1:])
    n = max(1, len(held))
    total = sum(sum(t.bytes for t in i.tables) for i in held) / n
    commands = sum(t.rows for i in held for t in i.tables if t.table == commands_table) / n
    offered_s = sum(i.seconds for i in intervals if i.index > 0)
    created = sum(i.created for i in intervals)
    return StorageCost(total, commands, created / offered_s if offered_s else 0.0, devices)


def partitions_rolled(intervals: Sequence[Interval]) -> dict[str, tuple[int, int]]:
    """Per partitioned table, the partitions created and dropped between the first sample
    and the last: a soak whose partitions never rolled did not test their retention."""
    seen: dict[str, set[str]] = {}
    gone: dict[str, set[str]] = {}
    first: dict[str, frozenset[str]] = {}
    for i in intervals:
        for t in i.tables:
            if not t.partition_names and t.table not in seen:
                continue
            first.setdefault(t.table, t.partition_names)
            known = seen.setdefault(t.table, set())
            gone.setdefault(t.table, set()).update(known - t.partition_names)
            known |= t.partition_names
    return {table: (len(names - first[table]), len(gone[table])) for table, names in seen.items()}


def partitions_lines(rolled: Mapping[str, tuple[int, int]]) -> str:
    if not rolled:
        return "partitions: no measured table is partitioned on this database"
    lines = []
    for table, (created, dropped) in rolled.items():
        warn = "" if dropped else " (none dropped: the run did not roll this table's partitions)"
        lines.append(f"partitions of {table}: {created} created, {dropped} dropped{warn}")
    return "\n".join(lines)


def settings_table(values: Mapping[str, str]) -> str:
    return format_table(["setting (every process)", "value"], sorted(values.items()))


def _process_order(name: str) -> tuple[int, str]:
    """Bridges, workers and beat, then the bench, the servers and the whole machine."""
    ranks = {"bench": 2, "machine": 4} | dict.fromkeys(SERVERS, 3)
    return (0 if name.startswith("bridge") else ranks.get(name, 1)), name


def _clock(seconds: float) -> str:
    s = max(0, round(seconds))
    return f"{s // 3600:d}:{s % 3600 // 60:02d}:{s % 60:02d}"


def _indent(text: str) -> str:
    return "\n".join("  " + line for line in text.splitlines())


def _mib(value: float | None) -> object:
    return MISSING if value is None else round(value / MIB, 2)


def _pct(value: float | None) -> object:
    return MISSING if value is None else round(value)


def _ms(value: float) -> object:
    return MISSING if math.isnan(value) else round(value)


def _round(value: float) -> float | None:
    return None if math.isnan(value) else round(value, 2)


def _bytes(value: float) -> str:
    if math.isnan(value):
        return MISSING
    for unit, size in (("GiB", 1024**3), ("MiB", MIB), ("KiB", 1024)):
        if abs(value) >= size:
            return f"{value / size:,.1f} {unit}"
    return f"{value:,.0f} B"
