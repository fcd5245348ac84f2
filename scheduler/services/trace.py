"""The execution trace: one ``TraceRecord`` record per execution of a claimed row, appended
in bulk (one INSERT per executed chunk), and its retention.

Written after the coordination commit (``transaction.on_commit`` on the coordination table's
database), best-effort: a failed write is a log line and ``farm_scheduler_trace_write_failures
_total``, never a rolled-back or blocked row. So the trace never holds an execution whose row
change rolled back, and may miss one whose write failed. Nothing here is read to find work.
"""

from __future__ import annotations

import json
import logging
import os
import socket
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.conf import settings
from django.db import router, transaction

from common.handoff import after_commit
from common.json_types import JsonObject, JsonValue
from scheduler.metrics import SCHEDULER_TRACE_WRITE_FAILURES
from scheduler.models import DueWork, TraceRecord
from scheduler.registry import SchedulerJob
from scheduler.states import FinishOutcome
from scheduler.trace_storage import trace_blob_delete

logger = logging.getLogger(__name__)
TRACE_PRUNE_MAX_BATCHES = 20  # per prune run: the next run takes the rest


def _worker() -> str:
    """Host and process (read per batch: prefork children fork after import)."""
    return f"{socket.gethostname()}:{os.getpid()}"[:120]


def _bounded(coordinates: Mapping[str, JsonValue] | None) -> JsonObject | None:
    """The row's dispatch coordinates, as small as the row keeps them."""
    if coordinates is None:
        return None
    value = dict(coordinates)
    size = len(json.dumps(value, default=str).encode())
    if size > settings.SCHEDULER_RESULT_MAX_BYTES:
        return {"omitted": "too large", "bytes": size}
    return json.loads(json.dumps(value, default=str))


@dataclass
class TraceBatch:
    """The records of one executed chunk, written together once the chunk committed."""

    records: list[TraceRecord] = field(default_factory=list)

    def add(
        self,
        *,
        job: SchedulerJob,
        outcome: FinishOutcome,
        started_at: datetime,
        duration_s: float,
        reason: str = "",
        detail: str = "",
        coordinates: Mapping[str, JsonValue] | None = None,
        trace_blob_name: str = "",
    ) -> None:
        duration_ms = max(0, round(duration_s * 1000))
        self.records.append(
            TraceRecord(
                scheduler_id=job.scheduler_id,
                automation_type=job.automation_type,
                scheduler_key=job.scheduler_key,
                token=job.token,
                attempt=job.retry_count + 1,
                outcome=outcome,
                reason=str(reason),
                detail=detail[:500],
                started_at=started_at,
                finished_at=started_at + timedelta(milliseconds=duration_ms),
                duration_ms=duration_ms,
                coordinates=_bounded(coordinates),
                trace_blob_name=trace_blob_name,
            )
        )

    def flush(self) -> None:
        """Hand the records to the writer once the coordination transaction commits (at once
        outside one); the batch is empty after."""
        if not self.records:
            return
        records, self.records = self.records, []
        coordination = router.db_for_write(DueWork)
        after_commit(lambda: trace_records_write(records), using=coordination)


def trace_records_write(records: list[TraceRecord]) -> int:
    """Append ``records`` in one INSERT (a record already there is absorbed by the unique
    key), with each row's farm and organisation read in one query; the number handed over,
    0 if the write failed (logged and counted, never raised)."""
    try:
        ids = {r.scheduler_id for r in records}
        owners = {
            pk: (farm, org)
            for pk, farm, org in DueWork.objects.filter(pk__in=ids).values_list(
                "pk", "farm_id", "farm__organization_id"
            )
        }
        worker = _worker()
        for record in records:
            record.farm_id, record.organization_id = owners.get(record.scheduler_id, (None, None))
            record.worker = worker
        alias = router.db_for_write(TraceRecord)
        with transaction.atomic(using=alias):  # a failure inside a caller's transaction stays ours
            TraceRecord.objects.using(alias).bulk_create(records, ignore_conflicts=True)
    except Exception as exc:
        SCHEDULER_TRACE_WRITE_FAILURES.inc(len(records))
        logger.warning("scheduler trace: %d execution records not written: %s", len(records), exc)
        return 0
    return len(records)


@dataclass(frozen=True)
class TracePruneResult:
    records: int
    blobs: int


def scheduler_trace_prune(*, now: datetime, batch: int | None = None) -> TracePruneResult:
    """Delete trace records finished more than ``SCHEDULER_TRACE_RETENTION_DAYS`` ago and their
    blobs, oldest first, in bounded batches (at most ``TRACE_PRUNE_MAX_BATCHES`` per call). A
    row still naming a pruned blob forgets it (guarded by the name, so a newer one stays). A
    record whose blob the storage would not delete is kept, and the run stops: the next one
    retries it rather than leave the blob behind with nothing pointing at it."""
    batch = batch or settings.SCHEDULER_TRACE_PRUNE_BATCH
    cutoff = now - timedelta(days=settings.SCHEDULER_TRACE_RETENTION_DAYS)
    old = TraceRecord.objects.filter(finished_at__lt=cutoff).order_by("finished_at", "pk")
    records = blobs = 0
    for _ in range(TRACE_PRUNE_MAX_BATCHES):
        rows = list(old.values_list("pk", "scheduler_id", "trace_blob_name")[:batch])
        kept = {name for _, _, name in rows if name and not trace_blob_delete(name)}
        gone = [(pk, sid, name) for pk, sid, name in rows if name not in kept]
        named = [(sid, name) for _, sid, name in gone if name]
        if named:
            DueWork.objects.filter(
                pk__in={sid for sid, _ in named}, trace_blob_name__in={n for _, n in named}
            ).update(trace_blob_name="")
        if gone:
            TraceRecord.objects.filter(pk__in=[pk for pk, _, _ in gone]).delete()
        records += len(gone)
        blobs += len({name for _, name in named})
        if kept or len(rows) < batch:
            break
    return TracePruneResult(records=records, blobs=blobs)
