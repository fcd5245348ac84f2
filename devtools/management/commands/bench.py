"""`make bench`: ingest, command-path latency, scheduler throughput and the rollout driver's
waves on this machine in one run, each next to its bare counterpart (paho alone, plain SQL),
then again at ``--scale``× the devices and rows to show how cost grows. The measuring lives
in ``devtools.bench``; this command only reads options and prints. Run it against a
development database: it starts a worker and beat of its own, and deletes every row it
creates. ``--storage`` instead
prints what a stored value costs on disk (PostgreSQL, ``devtools.bench.storage``);
``--distributed --soak`` runs the deployed stack for long at one rate and judges its trends
(``devtools.bench.distributed.soak``)."""

from __future__ import annotations

import signal
from collections.abc import Callable
from types import FrameType
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from devtools.bench import BenchError
from devtools.bench.distributed import cli as distributed_cli
from devtools.bench.distributed.plan import PlanError
from devtools.bench.distributed.run import distributed_run
from devtools.bench.distributed.soak import soak_run
from devtools.bench.runner import PHASES, BenchPlan, BenchSizes, bench_run
from devtools.bench.storage import storage_run

# Sizes per preset; an option given on the command line wins over its preset.
PRESETS: dict[str, dict[str, Any]] = {
    "full": {
        "devices": 200,
        "messages": 2000,
        "farms": 20,
        "commands": 100,
        "rate": 5.0,
        "rows": 10_000,
        "finish_rows": 1000,
        "targets": 2000,
        "scale": 10,
    },
    "quick": {
        "devices": 4,
        "messages": 40,
        "farms": 2,
        "commands": 4,
        "rate": 20.0,
        "rows": 100,
        "finish_rows": 20,
        "targets": 40,
        "scale": 2,
    },
}
# ``--storage``: messages when --messages is not given (the size issue 26 was measured at).
STORAGE_MESSAGES = {"full": 20_000, "quick": 400}
# Rollout waves whose statements are counted (the base size only).
WAVE_SIZES = {"full": (1, 10, 100, 1000), "quick": (1, 10)}


class Command(BaseCommand):
    help = "Ingest, command latency and scheduler figures side by side with bare baselines."

    def add_arguments(self, parser: CommandParser) -> None:
        full = PRESETS["full"]
        add = parser.add_argument
        add("--devices", type=int, help=f"ingest: sensors ({full['devices']})")
        add("--messages", type=int, help=f"ingest: telemetry messages ({full['messages']})")
        add("--farms", type=int, help=f"command path: sensor+relay farms ({full['farms']})")
        add("--commands", type=int, help=f"command path: readings offered ({full['commands']})")
        add(
            "--rate",
            type=float,
            help=f"command path: readings per second ({full['rate']:g}); with --distributed "
            "--soak: crossings per second",
        )
        add("--rows", type=int, help=f"scheduler: due rows per claim run ({full['rows']})")
        add(
            "--finish-rows",
            type=int,
            help=f"scheduler: rows per execute run ({full['finish_rows']})",
        )
        add("--targets", type=int, help=f"rollout: targets started ({full['targets']})")
        add("--workers", default="1,2,4", help="scheduler: comma-separated worker counts")
        add("--batch", type=int, default=500, help="ingest: messages per service batch")
        add("--claim-batch", type=int, default=50, help="scheduler: rows claimed per statement")
        add("--scale", type=int, help=f"growth factor, 1 skips growth ({full['scale']})")
        add(
            "--only",
            help=f"comma-separated subset of: {','.join(PHASES)} (all by default; the "
            "distributed run has its own phases)",
        )
        add("--quick", action="store_true", help="tiny sizes (a smoke run, not figures)")
        add(
            "--storage",
            action="store_true",
            help="bytes per table, index and stored value after VACUUM FULL (PostgreSQL; "
            f"--messages defaults to {STORAGE_MESSAGES['full']:,})",
        )
        add(
            "--read-all",
            action="store_true",
            help="with --storage: every sensor value read (a threshold reminder's metric on "
            "each endpoint), so every value is an endpoint event too",
        )
        distributed_cli.add_arguments(parser)

    def handle(self, *args: Any, **opts: Any) -> None:
        if opts["distributed"]:
            try:
                distributed = distributed_cli.plan_from_options(opts)
            except PlanError as exc:
                raise CommandError(str(exc)) from exc
            if distributed.soak is not None:
                _stoppable(lambda: soak_run(distributed, self.stdout.write, self.stderr.write))
            else:
                _stoppable(lambda: distributed_run(distributed, self.stdout.write))
            return
        for option in ("soak", "soak_interval", "soak_retention"):
            if opts.get(option) is not None:
                raise CommandError(f"--{option.replace('_', '-')} needs --distributed")
        sizes = "quick" if opts["quick"] else "full"
        preset = PRESETS[sizes]
        if opts["storage"]:
            self._storage(opts, preset["devices"], STORAGE_MESSAGES[sizes])
            return
        size = {name: preset[name] if opts[name] is None else opts[name] for name in preset}
        only = opts["only"] or ",".join(PHASES)
        phases = frozenset(p.strip() for p in only.split(",") if p.strip())
        if not phases or phases - set(PHASES):
            raise CommandError(f"--only takes a subset of {','.join(PHASES)}")
        if size["scale"] < 1 or size["rate"] <= 0 or min(size["devices"], size["farms"]) < 1:
            raise CommandError("--scale, --devices and --farms must be >= 1, --rate > 0")
        if size["targets"] < 1:
            raise CommandError("--targets must be >= 1")
        plan = BenchPlan(
            base=BenchSizes(
                devices=size["devices"],
                messages=size["messages"],
                farms=size["farms"],
                readings=size["commands"],
                rate=size["rate"],
                rows=size["rows"],
                finish_rows=size["finish_rows"],
                targets=size["targets"],
            ),
            scale=size["scale"],
            phases=phases,
            workers=tuple(int(w) for w in opts["workers"].split(",") if w.strip()),
            batch=opts["batch"],
            claim_batch=opts["claim_batch"],
            wave_sizes=WAVE_SIZES[sizes],
        )
        _stoppable(lambda: bench_run(plan, self.stdout.write))

    def _storage(self, opts: dict[str, Any], devices: int, messages: int) -> None:
        devices = devices if opts["devices"] is None else opts["devices"]
        messages = messages if opts["messages"] is None else opts["messages"]
        if devices < 1 or messages < 1 or opts["batch"] < 1:
            raise CommandError("--devices, --messages and --batch must be >= 1")
        batch, write, read_all = opts["batch"], self.stdout.write, opts["read_all"]
        _stoppable(
            lambda: storage_run(
                devices=devices, messages=messages, batch=batch, read_all=read_all, write=write
            )
        )


def _stoppable(run: Callable[[], None]) -> None:
    """A stopped bench still deletes its rows and stops its processes: SIGTERM unwinds like
    Ctrl-C does."""
    previous = signal.signal(signal.SIGTERM, _terminate)
    try:
        run()
    except BenchError as exc:
        raise CommandError(str(exc)) from exc
    finally:
        signal.signal(signal.SIGTERM, previous)


def _terminate(signum: int, frame: FrameType | None) -> None:
    raise SystemExit(128 + signum)
