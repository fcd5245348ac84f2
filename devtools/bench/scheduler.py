"""Scheduler claim throughput on PostgreSQL with 1, 2 and 4 workers (threads, one connection
each), next to a bare ``FOR UPDATE SKIP LOCKED`` loop on an identical table in the same run,
so each figure is read as a ratio to what the database can do.

Paths, each in the same shape for service and bare:
* claim: claim batches until nothing is due (claimed rows/s);
* claim + finish per row: each claimed row finished in its own transaction (the service
  writes Completed WHERE version = token plus its audit row);
* execute (service only, vs the bare per-row finish): the full per-row path with a no-op
  handler (read, revalidate, run, complete, audit), what a worker really sustains.

The bench's rows are due in the year 2000 and every service call gets that injected ``now``,
so rows of a real deployment in the same database are never claimed. A scheduler running
against the same database at the same time would claim the bench's rows, though: run no
worker or beat next to it (``manage.py bench`` runs this phase after its pipeline stopped).
"""

from __future__ import annotations

import sys
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from types import TracebackType

from django.db import connection, connections
from django.db.models import Count

from config.tables import format_table
from devtools.bench import BenchError
from devtools.bench.report import Figure, ratio
from scheduler.keys import report_manual_key, scheduler_input_hash, scheduler_key
from scheduler.models import (
    AutomationType,
    DueWork,
    DueWorkTransition,
    TriggerType,
)
from scheduler.registry import HandlerResult, SchedulerJob, scheduler_handler_override
from scheduler.selectors import DUE_WHERE_SQL, TABLE, scheduler_due_explain
from scheduler.services import (
    ClaimStrategy,
    scheduler_claim_due,
    scheduler_complete,
    scheduler_execute,
)

BENCH_NOW = datetime(2000, 1, 1, tzinfo=UTC)
BARE = "bench_bare_scheduler"
AUDIT = DueWorkTransition._meta.db_table
# The bare claim: the same due predicate and index, no version check, nothing else.
BARE_CLAIM = (
    f"UPDATE {BARE} SET status = 'processing', processing_lease_expires_on = %(lease)s, "
    f"version = version + 1 WHERE id IN (SELECT id FROM {BARE} WHERE "
    f"{DUE_WHERE_SQL} ORDER BY scheduled_on LIMIT %(limit)s FOR UPDATE SKIP LOCKED) "
    "RETURNING id, version"
)
BARE_FINISH = (
    f"UPDATE {BARE} SET status = 'completed', version = version + 1, "
    "processing_lease_expires_on = NULL, completed_on = %s, dispatch_result_json = %s "
    "WHERE id = %s AND version = %s"
)
BARE_CLAIM_PATH = "bare SKIP LOCKED claim"
CLAIM_PATH = "scheduler_claim_due (skip_locked)"
ROWWISE_PATH = "scheduler_claim_due (rowwise CAS)"
BARE_FINISH_PATH = "bare claim + finish per row"
COMPLETE_PATH = "claim + scheduler_complete per row"
EXECUTE_PATH = "claim + scheduler_execute per row"
Worker = Callable[[], int]


def scheduler_unavailable() -> str | None:
    """Why the scheduler bench cannot run on this database, or None."""
    if connection.vendor != "postgresql":
        return (
            f"scheduler skipped: it measures FOR UPDATE SKIP LOCKED, which {connection.vendor}"
            " does not have; set DATABASE_URL=postgres://"
        )
    if DueWork.objects.filter(scheduled_on__lte=BENCH_NOW).exists():
        return "scheduler skipped: rows due before 2000-01-01 exist; the bench would claim them"
    return None


class NullHandler:
    """Revalidates nothing and queues nothing: measures the scheduler, not a handler."""

    def revalidate(self, job: SchedulerJob) -> None:
        return None

    def run(self, job: SchedulerJob) -> HandlerResult:
        return HandlerResult(coordinates={"bench": True})


@dataclass
class SchedulerResult:
    """(workers, path, rows, seconds, rows/s, vs bare) per measurement."""

    rows: list[tuple[int, str, int, float, float, str]] = field(default_factory=list)

    def figures(self) -> list[Figure]:
        return [
            Figure(f"scheduler: {path}, {workers} worker(s)", rate, "rows/s", True)
            for workers, path, _, _, rate, _ in self.rows
        ]

    def table(self) -> str:
        headers = ["workers", "path", "rows", "seconds", "rows/s", "vs bare"]
        return format_table(headers, self.rows)


class SchedulerBench:
    """Owns the bare twin table and the run's rows: ``with SchedulerBench() as bench``
    creates the table, and leaving the block deletes every row and drops it."""

    def __init__(self, *, batch: int = 50) -> None:
        self.tag = uuid.uuid4()
        self.batch = batch

    def __enter__(self) -> SchedulerBench:
        reason = scheduler_unavailable()
        if reason is not None:
            raise BenchError(reason)
        with connection.cursor() as cursor:
            cursor.execute(f"DROP TABLE IF EXISTS {BARE}")
            cursor.execute(f"CREATE TABLE {BARE} (LIKE {TABLE} INCLUDING ALL)")
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._cleanup()
        with connection.cursor() as cursor:
            cursor.execute(f"DROP TABLE IF EXISTS {BARE}")

    def explain(self, rows: int) -> str:
        """The plan of the claim's due select with ``rows`` due rows in place."""
        self._seed(rows, False)
        try:
            return scheduler_due_explain(now=BENCH_NOW, limit=self.batch)
        finally:
            self._cleanup()

    def run(
        self, *, workers: Sequence[int], rows: int, finish_rows: int, full: bool
    ) -> SchedulerResult:
        """Every path per worker count; without ``full`` only claim and execute (the rowwise
        claim and the bare complete are the slow, explanatory ones)."""
        result = SchedulerResult()
        with scheduler_handler_override(AutomationType.REPORT_SUBSCRIPTION, NullHandler()):
            for count in workers:
                result.rows += self._round(count, rows, finish_rows, full)
        return result

    def _round(
        self, workers: int, rows: int, finish_rows: int, full: bool
    ) -> list[tuple[int, str, int, float, float, str]]:
        """Each service path next to its bare counterpart, on freshly seeded rows."""
        out = []
        bare_claim = self._measure(BARE_CLAIM_PATH, workers, rows, self._bare_worker(False), True)
        out.append((workers, BARE_CLAIM_PATH, rows, *bare_claim, "1.00×"))
        # Rowwise is the SQLite path, measured here to show why PostgreSQL does not use it
        # (~20× slower); it runs on the smaller row count to keep the bench short.
        claims = [(CLAIM_PATH, ClaimStrategy.SKIP_LOCKED, rows)]
        if full:
            claims.append((ROWWISE_PATH, ClaimStrategy.ROWWISE, finish_rows))
        for label, strategy, n in claims:
            seconds, rate = self._measure(label, workers, n, self._claim_worker(strategy, None))
            out.append((workers, label, n, seconds, rate, ratio(rate, bare_claim[1])))
        bare_fin = self._measure(
            BARE_FINISH_PATH, workers, finish_rows, self._bare_worker(True), True
        )
        out.append((workers, BARE_FINISH_PATH, finish_rows, *bare_fin, "1.00×"))
        finishes = [(EXECUTE_PATH, self._execute)]
        if full:
            finishes.insert(0, (COMPLETE_PATH, self._complete))
        for label, finish in finishes:
            seconds, rate = self._measure(
                label, workers, finish_rows, self._claim_worker(ClaimStrategy.SKIP_LOCKED, finish)
            )
            out.append((workers, label, finish_rows, seconds, rate, ratio(rate, bare_fin[1])))
        return out

    # -- for a bench whose workers are other processes (devtools.bench.distributed) ------

    def seed_due(self, rows: int) -> None:
        """``rows`` due rows of this bench in the product's table."""
        self._seed(rows, False)

    def statuses(self) -> dict[str, int]:
        """This bench's rows in the product's table, by status."""
        prefix = f"report-subscription:{self.tag}:"
        rows = DueWork.objects.filter(scheduler_key__startswith=prefix)
        return dict(rows.values("status").annotate(n=Count("pk")).values_list("status", "n"))

    def rows_delete(self) -> None:
        self._cleanup()

    def bare_claim_finish(self, workers: int, rows: int) -> tuple[float, float]:
        """Seconds and rows/s of the bare claim + finish-per-row loop on ``rows`` rows."""
        return self._measure(BARE_FINISH_PATH, workers, rows, self._bare_worker(True), True)

    def _measure(
        self, label: str, workers: int, rows: int, worker: Worker, bare: bool = False
    ) -> tuple[float, float]:
        self._seed(rows, bare)
        done = [0] * workers

        def run(i: int) -> None:
            try:
                done[i] = worker()
            finally:
                connections.close_all()

        threads = [threading.Thread(target=run, args=(i,)) for i in range(workers)]
        started = time.perf_counter()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        seconds = time.perf_counter() - started
        self._cleanup()
        if sum(done) != rows:
            raise BenchError(f"{label}: claimed {sum(done)} of {rows} rows")
        sys.stderr.write(f"{workers} worker(s) {label}: {rows / seconds:,.0f} rows/s\n")
        return seconds, rows / seconds

    def _claim_worker(
        self, strategy: ClaimStrategy, finish: Callable[[int, int], None] | None
    ) -> Worker:
        def work() -> int:
            total = 0
            while rows := scheduler_claim_due(now=BENCH_NOW, limit=self.batch, strategy=strategy):
                if finish is not None:
                    for row in rows:
                        finish(row.scheduler_id, row.token)
                total += len(rows)
            return total

        return work

    def _complete(self, pk: int, token: int) -> None:
        scheduler_complete(scheduler_id=pk, token=token, coordinates={"bench": True}, now=BENCH_NOW)

    def _execute(self, pk: int, token: int) -> None:
        scheduler_execute(scheduler_id=pk, token=token, now=BENCH_NOW)

    def _bare_worker(self, finish: bool) -> Worker:
        lease = BENCH_NOW + timedelta(minutes=5)

        def work() -> int:
            total = 0
            with connection.cursor() as cursor:
                while True:
                    cursor.execute(
                        BARE_CLAIM, {"now": BENCH_NOW, "limit": self.batch, "lease": lease}
                    )
                    rows = cursor.fetchall()
                    if not rows:
                        return total
                    if finish:
                        for pk, version in rows:
                            cursor.execute(BARE_FINISH, [BENCH_NOW, '{"bench": true}', pk, version])
                    total += len(rows)

        return work

    def _seed(self, rows: int, bare: bool) -> None:
        digest = scheduler_input_hash("bench")
        objs = [
            DueWork(
                automation_type=AutomationType.REPORT_SUBSCRIPTION,
                trigger_type=TriggerType.MANUAL_RUN,
                scheduler_key=scheduler_key(
                    report_manual_key(subscription_guid=self.tag, manual_run_guid=uuid.uuid4())
                ),
                scheduled_on=BENCH_NOW - timedelta(days=1, seconds=i),
                input_hash=digest,
                created_on=BENCH_NOW,
                updated_on=BENCH_NOW,
            )
            for i in range(rows)
        ]
        DueWork.objects.bulk_create(objs, batch_size=2000)
        if bare:  # the same rows, moved to the identical bare table
            with connection.cursor() as cursor:
                cursor.execute(f"INSERT INTO {BARE} SELECT * FROM {TABLE} WHERE {self._mine()}")
                cursor.execute(f"DELETE FROM {TABLE} WHERE {self._mine()}")
        with connection.cursor() as cursor:
            cursor.execute(f"ANALYZE {BARE if bare else TABLE}")

    def _mine(self) -> str:
        return f"scheduler_key LIKE 'report-subscription:{self.tag}:%%'"

    def _cleanup(self) -> None:
        prefix = f"report-subscription:{self.tag}:"
        mine = DueWork.objects.filter(scheduler_key__startswith=prefix)
        with connection.cursor() as cursor:
            cursor.execute(
                f"DELETE FROM {AUDIT} WHERE scheduler_id IN "
                f"(SELECT id FROM {TABLE} WHERE {self._mine()})"
            )
            cursor.execute(f"TRUNCATE {BARE}")
        mine.delete()
