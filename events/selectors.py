"""Reads of the event bus: the consumer's dedupe checks, the operators' dead-letter views and
the counts a metrics scrape derives from the dead-letter table."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime

from django.db.models import Count
from prometheus_client.core import GaugeMetricFamily

from events.models import EventDeadLetter, EventHandlerAttempt, EventInbox
from events.states import DeadLetterStatus


@dataclass(frozen=True)
class DeadLetterCount:
    event_type: str
    handler: str
    reason: str
    count: int


def inbox_has(*, handler: str, idempotency_key: str) -> bool:
    return EventInbox.objects.filter(handler=handler, idempotency_key=idempotency_key).exists()


def dead_letter_is_open(*, handler: str, idempotency_key: str) -> bool:
    return EventDeadLetter.objects.filter(
        handler=handler, idempotency_key=idempotency_key, status=DeadLetterStatus.OPEN
    ).exists()


def dead_letters_list(
    *, status: str | None = DeadLetterStatus.OPEN, event_type: str | None = None, limit: int = 50
) -> list[EventDeadLetter]:
    """Newest first; ``status=None`` lists every status."""
    rows = EventDeadLetter.objects.all()
    if status is not None:
        rows = rows.filter(status=status)
    if event_type is not None:
        rows = rows.filter(event_type=event_type)
    return list(rows.order_by("-created_at", "-pk")[:limit])


def dead_letter_get(*, dead_letter_id: int) -> EventDeadLetter | None:
    return EventDeadLetter.objects.filter(pk=dead_letter_id).first()


def dead_letter_counts(*, status: str | None = DeadLetterStatus.OPEN) -> list[DeadLetterCount]:
    """Dead letters by (type, handler, reason): the gauge behind the dead-letter alert metric,
    read at scrape time so it is right across processes."""
    rows = EventDeadLetter.objects.all()
    if status is not None:
        rows = rows.filter(status=status)
    grouped = (
        rows.values("event_type", "handler", "reason")
        .annotate(count=Count("id"))
        .order_by("event_type", "handler", "reason")
    )
    return [
        DeadLetterCount(r["event_type"], r["handler"], r["reason"], r["count"]) for r in grouped
    ]


def handler_attempts(*, handler: str, idempotency_key: str) -> int:
    """Failed attempts counted so far for (handler, key); 0 when none failed."""
    found = (
        EventHandlerAttempt.objects.filter(handler=handler, idempotency_key=idempotency_key)
        .values_list("attempts", flat=True)
        .first()
    )
    return found or 0


def dead_letter_gauges(now: datetime) -> Iterator[GaugeMetricFamily]:
    """``farm_dead_letters_open`` for ``/metrics`` (registered when the app loads)."""
    dead = GaugeMetricFamily(
        "farm_dead_letters_open",
        "Open dead letters by type, handler and reason (alert when > 0).",
        labels=["event_type", "handler", "reason"],
    )
    for c in dead_letter_counts():
        dead.add_metric([c.event_type, c.handler, c.reason], c.count)
    yield dead
