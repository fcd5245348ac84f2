"""Celery tasks of the due-work scheduler (queue ``scheduler``): take ids, call one service.

Beat drives both sweeps (config.beat). The due poll claims rows and fans out one execute task
per row; a lost execute message leaves the row Processing until its lease expires, and stale
cleanup returns it to Pending: the database, not the broker, holds the work.
"""

from __future__ import annotations

from celery import shared_task
from django.utils import timezone

from config.celery import DB_RETRY, routed_to
from scheduler.services import (
    ClaimedRow,
    scheduler_due_fan_out,
    scheduler_execute,
    scheduler_release_stale,
)

EXECUTE_TASK = "automation.scheduler_execute"


def _enqueue(row: ClaimedRow) -> None:
    scheduler_execute_task.apply_async(args=[row.scheduler_id, row.token])


@shared_task(name="automation.scheduler_poll_due", **routed_to("scheduler"))
def scheduler_poll_due_task() -> int:
    """Claim what is due, in bounded batches, and fan out one execute task per row."""
    return scheduler_due_fan_out(now=timezone.now(), enqueue=_enqueue)


@shared_task(name=EXECUTE_TASK, **routed_to("scheduler"), **DB_RETRY)
def scheduler_execute_task(scheduler_id: int, token: int) -> str:
    return str(scheduler_execute(scheduler_id=scheduler_id, token=token))


@shared_task(name="automation.scheduler_release_stale", **routed_to("scheduler"))
def scheduler_release_stale_task() -> int:
    """Return expired claims to Pending on the backoff ladder (or support hold)."""
    result = scheduler_release_stale(now=timezone.now())
    return result.released + result.held
