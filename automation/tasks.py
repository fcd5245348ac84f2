"""Celery tasks of the execution core: take ids, call one service, own retries only."""

from __future__ import annotations

from datetime import timedelta

from celery import shared_task
from django.conf import settings
from django.db import OperationalError
from django.utils import timezone

from automation.services.evaluate import endpoint_events_evaluate, endpoint_events_pending


def _chunks(ids: list[int], size: int) -> list[list[int]]:
    return [ids[i : i + size] for i in range(0, len(ids), size)]


def endpoint_events_enqueue(event_ids: list[int]) -> None:
    for chunk in _chunks(event_ids, settings.EVALUATE_BATCH_SIZE):
        endpoint_events_evaluate_task.delay(chunk)


@shared_task(
    name="automation.endpoint_events_evaluate",
    autoretry_for=(OperationalError,),
    retry_backoff=True,
    max_retries=5,
)
def endpoint_events_evaluate_task(event_ids: list[int]) -> int:
    result = endpoint_events_evaluate(event_ids=event_ids)
    return result.executions


@shared_task(name="automation.endpoint_events_sweep")
def endpoint_events_sweep_task() -> int:
    """Re-queue events left pending (a lost Celery message), in one bounded batch."""
    older_than = timezone.now() - timedelta(seconds=settings.EVENT_SWEEP_AFTER_S)
    ids = endpoint_events_pending(older_than=older_than, limit=settings.SWEEP_BATCH_SIZE)
    endpoint_events_enqueue(ids)
    return len(ids)
