"""Celery tasks of the due-work scheduler (queue ``scheduler``): take ids, call one service.

Beat drives the sweeps (config.beat). The due poll claims rows and fans out one execute task
per chunk of rows; a lost execute message leaves its rows Processing until their lease
expires, and stale cleanup returns them to Pending: the database, not the broker, holds the
work.
"""

from __future__ import annotations

from celery import shared_task
from django.conf import settings
from django.utils import timezone

from config.celery import DB_RETRY, previous_names_register, routed_to
from config.task_names import (
    SCHEDULER_EXECUTE,
    SCHEDULER_EXECUTE_BATCH,
    SCHEDULER_POLL_DUE,
    SCHEDULER_RELEASE_STALE,
    SCHEDULER_TRACE_PRUNE,
)
from scheduler.services import (
    ClaimedRow,
    scheduler_due_fan_out,
    scheduler_execute,
    scheduler_execute_chunk,
    scheduler_release_stale,
    scheduler_trace_prune,
)


def _enqueue(rows: list[ClaimedRow]) -> None:
    scheduler_execute_batch_task.apply_async(args=[[[r.scheduler_id, r.token] for r in rows]])


@shared_task(name=SCHEDULER_POLL_DUE, **routed_to("scheduler"))
def scheduler_poll_due_task() -> int:
    """Claim what is due, in bounded batches, and fan out one execute task per chunk; a poll
    that hit its bound queues the next at once (a backlog drains at worker speed, not at
    one bounded poll per beat tick)."""
    claimed = scheduler_due_fan_out(now=timezone.now(), enqueue=_enqueue)
    if claimed >= settings.SCHEDULER_POLL_MAX_ROWS:
        scheduler_poll_due_task.apply_async()
    return claimed


@shared_task(name=SCHEDULER_EXECUTE_BATCH, **routed_to("scheduler"), **DB_RETRY)
def scheduler_execute_batch_task(rows: list[list[int]]) -> dict[str, int]:
    """Each claimed row in its own transaction, then the chunk's trace in one INSERT."""
    outcomes = scheduler_execute_chunk(rows=[(pk, token) for pk, token in rows])
    return dict(outcomes)


# One row per task, as the poll fanned out before chunks: kept for messages queued across an
# upgrade.
@shared_task(name=SCHEDULER_EXECUTE, **routed_to("scheduler"), **DB_RETRY)
def scheduler_execute_task(scheduler_id: int, token: int) -> str:
    return str(scheduler_execute(scheduler_id=scheduler_id, token=token))


@shared_task(name=SCHEDULER_RELEASE_STALE, **routed_to("scheduler"))
def scheduler_release_stale_task() -> int:
    """Return expired claims to Pending on the backoff ladder (or support hold)."""
    result = scheduler_release_stale(now=timezone.now())
    return result.released + result.held


@shared_task(name=SCHEDULER_TRACE_PRUNE, **routed_to("scheduler"), **DB_RETRY)
def scheduler_trace_prune_task() -> int:
    """Trace records past SCHEDULER_TRACE_RETENTION_DAYS and their blobs, in bounded batches."""
    return scheduler_trace_prune(now=timezone.now()).records


# Their names from when the scheduler lived in the automation app, for one release
# (``config.task_names.PREVIOUS_TASK_NAMES``; the beat entries move with
# ``sync_beat_schedule``).
previous_names_register(
    scheduler_poll_due_task,
    scheduler_execute_batch_task,
    scheduler_release_stale_task,
    scheduler_trace_prune_task,
)
