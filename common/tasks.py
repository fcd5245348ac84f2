"""Housekeeping of what the API keeps (queue ``scheduler``, driven by beat)."""

from __future__ import annotations

from celery import shared_task
from django.utils import timezone

from common.api import idempotency_records_prune
from common.retention import retention_prune
from config.celery import DB_RETRY, routed_to
from config.metrics import RETENTION_PRUNED
from config.task_names import IDEMPOTENCY_RECORDS_PRUNE, RETENTION_PRUNE


@shared_task(name=IDEMPOTENCY_RECORDS_PRUNE, **routed_to("scheduler"), **DB_RETRY)
def idempotency_records_prune_task() -> int:
    """Expired Idempotency-Key records, in bounded batches; the next run takes any rest."""
    return idempotency_records_prune(now=timezone.now())


@shared_task(
    name=RETENTION_PRUNE,
    **routed_to("scheduler"),
    **DB_RETRY,
)
def retention_prune_task() -> dict[str, int]:
    """Rows past their table's retention, in bounded batches; the next run takes any rest."""

    def counted(label: str, deleted: int) -> None:
        RETENTION_PRUNED.labels(table=label).inc(deleted)

    return retention_prune(now=timezone.now(), on_batch=counted).deleted
