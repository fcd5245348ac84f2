"""A step's figures and how they are printed and written: the steps table, the per-step
stage breakdown, backlog and CPU, and the JSON document. Pure: the figures come in already
counted (``devtools.bench.distributed.accounting``), so shaping is tested without servers."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from config.tables import format_table
from devtools.bench.distributed.stages import MISSING, Hop
from devtools.bench.report import percentile, ratio

if TYPE_CHECKING:
    from devtools.bench.distributed.cost import StepCost

APPLIED, SUPERSEDED, NOT_NEEDED = "applied", "superseded", "not needed"
LOST = "lost"
LIVE = frozenset({"pending_dispatch", "dispatched", "acknowledged", "retrying"})
QUANTILES = (("p50", 0.5), ("p95", 0.95), ("p99", 0.99))


def crossing_outcome(
    *,
    event_status: str | None,
    event_reason: str = "",
    execution: str | None = None,
    command_status: str | None = None,
    command_reason: str = "",
) -> str:
    """What became of one offered crossing: applied, superseded (a newer reading or decision
    replaced it before it was sent), not needed (a command already asks for, or the device
    already holds, that value), or ``lost: <why>`` for anything else."""
    if event_status is None:
        return f"{LOST}: no event stored"
    if event_status == "discarded" and event_reason == "newer_reading":
        return SUPERSEDED
    if event_status != "processed":
        return f"{LOST}: event {event_status}" + (f"/{event_reason}" if event_reason else "")
    if execution in ("already_pending", "already_in_state"):
        return NOT_NEEDED
    if execution != "intent_created":
        return f"{LOST}: execution {execution or 'missing'}"
    if command_status == APPLIED:
        return APPLIED
    if command_status == "expired" and command_reason == "superseded":
        return SUPERSEDED
    if command_status in LIVE:
        return f"{LOST}: command still {command_status}"
    return f"{LOST}: command {command_status or 'missing'}" + (
        f"/{command_reason}" if command_reason else ""
    )


@dataclass
class StepResult:
    step: int
    rate: float
    seconds: float  # how long offering took
    offered: int
    outcomes: Counter[str] = field(default_factory=Counter)
    created: int = 0
    reached: int = 0
    to_rpc_ms: list[float] = field(default_factory=list)
    to_applied_ms: list[float] = field(default_factory=list)
    hops: list[Hop] = field(default_factory=list)
    backlog: dict[str, int] = field(default_factory=dict)  # queue → messages at step end
    cpu: dict[str, float] = field(default_factory=dict)  # process → % of one core
    cost: StepCost | None = None  # offer + settle, per command created
    cpu_ms: dict[str, float] = field(default_factory=dict)  # process → CPU ms per command
    tasks: dict[str, int] = field(default_factory=dict)  # Celery task name → run in the step

    @property
    def lost(self) -> int:
        return sum(n for o, n in self.outcomes.items() if o.startswith(LOST))

    def lost_reasons(self) -> str:
        lost = sorted((o, n) for o, n in self.outcomes.items() if o.startswith(LOST))
        return ", ".join(f"{o.removeprefix(LOST + ': ')} {n}" for o, n in lost)

    def row(self) -> tuple[object, ...]:
        return (
            f"{self.rate:g}/s",
            self.offered,
            self.created,
            self.reached,
            self.outcomes[APPLIED],
            self.outcomes[SUPERSEDED],
            self.outcomes[NOT_NEEDED],
            self.lost,
            *(_ms(percentile(self.to_rpc_ms, q)) for _, q in QUANTILES),
            *(_ms(percentile(self.to_applied_ms, q)) for _, q in QUANTILES),
        )

    def as_json(self) -> dict[str, Any]:
        def quantiles(ms: Sequence[float]) -> dict[str, float | None]:
            return {f"{name}_ms": _json_ms(percentile(ms, q)) for name, q in QUANTILES}

        return {
            "step": self.step,
            "rate_per_s": self.rate,
            "offer_seconds": round(self.seconds, 3),
            "offered": self.offered,
            "commands_created": self.created,
            "reached_device": self.reached,
            "applied": self.outcomes[APPLIED],
            "superseded": self.outcomes[SUPERSEDED],
            "not_needed": self.outcomes[NOT_NEEDED],
            "lost": self.lost,
            "outcomes": dict(sorted(self.outcomes.items())),
            "reading_to_rpc": quantiles(self.to_rpc_ms),
            "reading_to_applied": quantiles(self.to_applied_ms),
            "stages": [h.as_json() for h in self.hops],
            "backlog": dict(self.backlog),
            "cpu_percent": {k: round(v, 1) for k, v in self.cpu.items()},
            "cost": self.cost.as_json() if self.cost is not None else None,
            "cpu_ms_per_command": {k: round(v, 2) for k, v in self.cpu_ms.items()},
        }


STEP_HEADERS = [
    "offered/s", "offered", "commands", "at device", "applied", "superseded", "not needed",
    "lost", "→rpc p50", "→rpc p95", "→rpc p99", "→applied p50", "→applied p95", "→applied p99",
]  # fmt: skip


def steps_table(steps: Sequence[StepResult]) -> str:
    """One row per step; latencies in ms from the reading's timestamp."""
    return format_table(STEP_HEADERS, [s.row() for s in steps])


def stages_table(steps: Sequence[StepResult]) -> str:
    """Hop by hop, p50/p99 ms per step side by side."""
    if not steps:
        return ""
    headers = ["hop"] + [f"{s.rate:g}/s {name}" for s in steps for name in ("p50", "p99")]
    rows = []
    for position, hop in enumerate(steps[0].hops):
        cells: list[object] = [hop.label]
        for step in steps:
            h = step.hops[position]
            cells += list(h.cells()[2:])
        rows.append(cells)
    return format_table(headers, rows)


def load_table(steps: Sequence[StepResult]) -> str:
    """Queue backlog at the end of each step's offering and CPU % per process over it (% of
    one core; ``machine`` is % of all cores)."""
    queues = sorted({q for s in steps for q in s.backlog})
    procs = sorted({p for s in steps for p in s.cpu})
    headers = ["offered/s"] + [f"{q} queue" for q in queues] + [f"{p} cpu%" for p in procs]
    rows = [
        [f"{s.rate:g}/s"]
        + [s.backlog.get(q, MISSING) for q in queues]
        + [_pct(s.cpu.get(p)) for p in procs]
        for s in steps
    ]
    return format_table(headers, rows)


def ratios_table(rows: Sequence[tuple[str, float, str, float]], unit: str) -> str:
    """(product path, its rate, bare path, its rate) → product / bare."""
    return format_table(
        ["product", unit, "bare", unit, "product / bare"],
        [(p, pr, b, br, ratio(pr, br)) for p, pr, b, br in rows],
    )


def document(
    command: str, machine: str, steps: Sequence[StepResult], extra: Mapping[str, Any]
) -> dict[str, Any]:
    """The JSON written with ``--json``."""
    return {"command": command, "machine": machine, "steps": [s.as_json() for s in steps]} | dict(
        extra
    )


def _ms(value: float) -> float | str:
    return MISSING if math.isnan(value) else value


def _json_ms(value: float) -> float | None:
    return None if math.isnan(value) else round(value, 2)


def _pct(value: float | None) -> object:
    return MISSING if value is None else round(value)
