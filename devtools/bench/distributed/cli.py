"""The options ``manage.py bench --distributed`` adds, and the plan they make. Options the
in-process bench already has (``--farms``, ``--messages``, ``--devices``, ``--rows``,
``--workers``, ``--only``) keep their meaning and take this bench's defaults when unset."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django.core.management.base import CommandParser

from devtools.bench.distributed.plan import (
    PHASES,
    DistributedPlan,
    PlanError,
    numbers_parse,
    phases_parse,
    workers_parse,
)
from devtools.bench.distributed.profile import FORMATS
from devtools.bench.distributed.soak_plan import (
    DEFAULT_INTERVAL_S,
    DEFAULT_RATE,
    RETENTION_FLOOR_S,
    RETENTION_PERIODS,
    soak_from_options,
)
from devtools.bench.distributed.trend import LATENCY, RSS, TABLE_BYTES, Tolerance

DEFAULTS = DistributedPlan()


def add_arguments(parser: CommandParser) -> None:
    add = parser.add_argument
    add("--distributed", action="store_true",
        help="run the deployed processes (bridge, a worker per stage, beat) against the "
             "configured servers; sizes below")  # fmt: skip
    add("--bridges", type=int, default=DEFAULTS.bridges, help="distributed: bridge processes")
    add("--concurrency", default="",
        help="distributed: stage workers over deploy/Procfile.dev's, e.g. "
             "evaluate=2,dispatch=8:threads,reconcile=2")  # fmt: skip
    add("--steps", default=",".join(f"{s:g}" for s in DEFAULTS.steps),
        help="distributed: crossings offered per second, one step each")  # fmt: skip
    add("--step-seconds", type=float, default=DEFAULTS.step_seconds,
        help="distributed: seconds each step offers")  # fmt: skip
    add("--settle-seconds", type=float, default=DEFAULTS.settle_s,
        help="distributed: longest wait after a step for its commands to end")  # fmt: skip
    add("--json", type=Path, default=None, help="distributed: write the figures here")
    add("--out", type=Path, default=DEFAULTS.out_dir,
        help="distributed: directory for the run's logs and profiles")  # fmt: skip
    add("--profile", action="store_true",
        help="distributed: py-spy on the bridge and workers during the command path")  # fmt: skip
    add("--profile-format", choices=sorted(FORMATS), default=DEFAULTS.profile_format)
    add("--soak", type=float, default=None, metavar="SECONDS",
        help="distributed: instead of the phases, offer crossings at --rate for SECONDS "
             "(an hour at half the measured capacity is the intended run; run it on a "
             "database of its own: every table's retention is shortened), print a block "
             "per --soak-interval, and fail if p99 latency, a process's RSS or a table's "
             "bytes rises over the last 40 minutes (runs under an hour: the last two thirds) "
             f"by more than its tolerance: latency {_escaped(LATENCY)}, RSS "
             f"{_escaped(RSS)}, table bytes {_escaped(TABLE_BYTES)}. --rate defaults to "
             f"{DEFAULT_RATE:g}/s there (the README machine's steady rate)")  # fmt: skip
    add("--soak-interval", type=float, default=None, metavar="SECONDS",
        help=f"soak: seconds between printed samples ({DEFAULT_INTERVAL_S:g}; the run is six "
             "of them or more)")  # fmt: skip
    add("--soak-retention", type=float, default=None, metavar="SECONDS",
        help=f"soak: every table's retention (default: the run / {RETENTION_PERIODS}, at least "
             f"{RETENTION_FLOOR_S:g} s); partitions span half of it, prunes run every 1/20 "
             "of it (15-60 s), rollups every 1/4 (10-60 s)")  # fmt: skip


def _escaped(tolerance: Tolerance) -> str:
    """A tolerance as help text (argparse formats help with ``%``)."""
    return tolerance.describe().replace("%", "%%")


def plan_from_options(opts: dict[str, Any]) -> DistributedPlan:
    """The plan, or PlanError naming the option at fault."""

    def given(name: str, default: Any) -> Any:
        return default if opts.get(name) is None else opts[name]

    only = opts.get("only") or ",".join(PHASES)
    plan = DistributedPlan(
        farms=given("farms", DEFAULTS.farms),
        bridges=opts["bridges"],
        workers=workers_parse(opts["concurrency"]),
        steps=numbers_parse("--steps", opts["steps"]),
        step_seconds=opts["step_seconds"],
        settle_s=opts["settle_seconds"],
        phases=phases_parse(only),
        messages=given("messages", DEFAULTS.messages),
        ingest_devices=given("devices", DEFAULTS.ingest_devices),
        scheduler_rows=given("rows", DEFAULTS.scheduler_rows),
        scheduler_workers=tuple(
            int(n) for n in numbers_parse("--workers", opts.get("workers") or "1,2,4", integer=True)
        ),
        out_dir=opts["out"],
        json_path=opts["json"],
        profile=opts["profile"],
        profile_format=opts["profile_format"],
        soak=soak_from_options(opts),
    )
    if plan.soak is not None and plan.profile:
        raise PlanError("--profile is not available with --soak (py-spy over an hour)")
    if min(plan.farms, plan.bridges, plan.messages, plan.ingest_devices, plan.scheduler_rows) < 1:
        raise PlanError("--farms, --bridges, --messages, --devices and --rows must be >= 1")
    if plan.step_seconds <= 0 or plan.settle_s <= 0:
        raise PlanError("--step-seconds and --settle-seconds must be > 0")
    return plan
