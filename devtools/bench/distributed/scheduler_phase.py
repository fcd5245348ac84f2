"""The scheduler as deployed: K due rows drained by the poll and execute tasks on a
scheduler worker of 1, 2, 4 prefork processes, next to the bare SKIP LOCKED claim + finish
loop (``devtools.bench.scheduler``) with as many connections on the same rows."""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime

from django.conf import settings

from config.celery import app as celery_app
from config.tables import format_table
from config.task_names import SCHEDULER_POLL_DUE
from devtools.bench import BenchError
from devtools.bench.distributed.plan import WorkerSpec
from devtools.bench.distributed.stack import Stack
from devtools.bench.report import Progress, ratio
from devtools.bench.scheduler import SchedulerBench, scheduler_unavailable
from scheduler.models import DueWork
from scheduler.states import SchedulerStatus

OPEN = (SchedulerStatus.PENDING, SchedulerStatus.PROCESSING)
DRAIN_TIMEOUT_S = 600.0
Write = Callable[[str], None]


@dataclass
class SchedulerFigures:
    rows: int
    # (worker processes, product seconds, bare seconds, final statuses of the product's rows)
    runs: list[tuple[int, float, float, dict[str, int]]] = field(default_factory=list)

    def table(self) -> str:
        out = []
        for workers, product_s, bare_s, statuses in self.runs:
            product, bare = self.rows / product_s, self.rows / bare_s
            ended = ", ".join(f"{s} {n:,}" for s, n in sorted(statuses.items()))
            out.append((workers, self.rows, product, bare, ratio(product, bare), ended))
        headers = ["processes", "rows", "celery rows/s", "bare rows/s", "product / bare", "ended"]
        return format_table(headers, out)

    def as_json(self) -> dict[str, object]:
        return {
            "rows": self.rows,
            "runs": [
                {
                    "workers": w,
                    "product_rows_per_s": round(self.rows / p, 1),
                    "bare_rows_per_s": round(self.rows / b, 1),
                    "ended": s,
                }
                for w, p, b, s in self.runs
            ],
        }


def scheduler_skip_reason() -> str | None:
    """Why this database cannot take the phase: the bench's workers run with the real
    clock, so they would also execute any due row that is not the bench's."""
    reason = scheduler_unavailable()
    if reason is not None:
        return reason
    due = DueWork.objects.filter(
        status=SchedulerStatus.PENDING, scheduled_on__lte=datetime.now(UTC)
    ).count()
    if due:
        return f"scheduler skipped: {due:,} row(s) here are due; the bench's workers would run them"
    return None


def scheduler_phase(
    stack: Stack, rows: int, workers: tuple[int, ...], write: Write
) -> SchedulerFigures:
    figures = SchedulerFigures(rows)
    max_rows: int = settings.SCHEDULER_POLL_MAX_ROWS
    with SchedulerBench(batch=settings.SCHEDULER_CLAIM_BATCH) as bench:
        for count in workers:
            write(f"scheduler: worker of {count} prefork process(es), {rows:,} due rows")
            stack.worker_restart("scheduler", WorkerSpec(int(count), "prefork"), write)
            bench.seed_due(rows)
            started = time.perf_counter()
            # One poll claims at most SCHEDULER_POLL_MAX_ROWS (beat sends one per period):
            # enough polls at once that every process has one and every row is claimed.
            for _ in range(math.ceil(rows / max_rows) + int(count)):
                celery_app.send_task(SCHEDULER_POLL_DUE)
            statuses = _drained(bench, stack, rows)
            product_s = time.perf_counter() - started
            bench.rows_delete()
            write("scheduler: bare SKIP LOCKED claim + finish on the same rows")
            bare_s, _ = bench.bare_claim_finish(int(count), rows)
            figures.runs.append((int(count), product_s, bare_s, statuses))
    return figures


def _drained(bench: SchedulerBench, stack: Stack, rows: int) -> dict[str, int]:
    progress = Progress("scheduler")
    deadline = time.monotonic() + DRAIN_TIMEOUT_S
    while True:
        statuses = bench.statuses()
        left = sum(statuses.get(s, 0) for s in OPEN)
        progress.update(f"{rows - left:,}/{rows:,} rows finished", final=not left)
        if not left:
            return statuses
        if time.monotonic() > deadline:
            raise BenchError(f"scheduler: {left:,} of {rows:,} rows still open")
        stack.check_alive()
        time.sleep(0.1)
