"""Scheduler claim throughput on PostgreSQL with 1, 2 and 4 workers next to a bare SKIP
LOCKED loop, every path (see ``devtools.bench.scheduler``); ``manage.py bench`` runs the
claim and execute paths of it alongside the other figures."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from devtools.bench import BenchError
from devtools.bench.scheduler import BENCH_NOW, SchedulerBench


class Command(BaseCommand):
    help = "Measure scheduler claim rows/s (1, 2, 4 workers) vs a bare SKIP LOCKED loop."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--rows", type=int, default=20_000, help="due rows per claim run")
        parser.add_argument(
            "--finish-rows", type=int, default=2000, help="due rows per per-row-finish run"
        )
        parser.add_argument("--batch", type=int, default=50, help="rows claimed per statement")
        parser.add_argument("--workers", default="1,2,4", help="comma-separated worker counts")

    def handle(self, *args: Any, **opts: Any) -> None:
        counts = [int(w) for w in opts["workers"].split(",") if w.strip()]
        try:
            with SchedulerBench(batch=opts["batch"]) as bench:
                self.stdout.write("EXPLAIN of the claim's due select (SKIP LOCKED):")
                self.stdout.write(bench.explain(opts["rows"]))
                result = bench.run(
                    workers=counts, rows=opts["rows"], finish_rows=opts["finish_rows"], full=True
                )
        except BenchError as exc:
            raise CommandError(str(exc)) from exc
        self.stdout.write(
            f"\ndatabase: postgresql, claim batch {opts['batch']}, lease via injected now "
            f"({BENCH_NOW.date()}), workers are threads with one connection each"
        )
        self.stdout.write(result.table())
