"""Housekeeping of what the API keeps (queue ``scheduler``, driven by beat)."""

from __future__ import annotations

from celery import shared_task
from django.utils import timezone

from common.api import idempotency_records_prune
from config.celery import DB_RETRY, routed_to


@shared_task(name="common.idempotency_records_prune", **routed_to("scheduler"), **DB_RETRY)
def idempotency_records_prune_task() -> int:
    """Expired Idempotency-Key records, in bounded batches; the next run takes any rest."""
    return idempotency_records_prune(now=timezone.now())
