"""The consumer of the ``events`` queue: one message per published envelope."""

from __future__ import annotations

from typing import Any

from celery import Task, shared_task
from django.conf import settings

from config.celery import DB_RETRY, routed_to
from config.task_names import EVENTS_DELIVER
from events.services import event_deliver, event_retry_delay_s


@shared_task(
    name=EVENTS_DELIVER,
    **routed_to("events"),
    bind=True,
    **DB_RETRY,
)
def event_deliver_task(self: Task, envelope: dict[str, Any]) -> dict[str, str]:
    """Acknowledged when every handler is done, a duplicate or dead-lettered; retried with a
    short backoff while one failed below its attempt budget (counted in the database, so the
    Celery limit below is only a backstop)."""
    result = event_deliver(message=envelope)
    if result.retry_needed:
        raise self.retry(
            countdown=event_retry_delay_s(result.failed_attempts),
            max_retries=settings.EVENT_MAX_ATTEMPTS + 1,
        )
    return {name: str(outcome) for name, outcome in result.outcomes.items()}
