"""The event bus's transport, replaced inside a block: a recorder, or a broker that refuses.
Product code sends through ``events.services.publish.transport_current``; a test stands in
for it here, so no override lives in product code."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from unittest import mock

from celery import Celery

from config.task_names import EVENTS_DELIVER
from events.services import EventTransport
from events.services.publish import EVENTS_QUEUE


@contextmanager
def event_transport(transport: EventTransport) -> Iterator[None]:
    """Send through ``transport`` inside the block."""
    with mock.patch("events.services.publish.transport_current", lambda: transport):
        yield


def celery_transport(app: Celery) -> EventTransport:
    """Send each envelope through ``app`` (another broker) as the bus does through its own."""

    def send(message: object) -> None:
        app.send_task(EVENTS_DELIVER, args=[message], queue=EVENTS_QUEUE)

    return send
