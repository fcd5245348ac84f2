"""Publishing: an event leaves only after its business transaction committed, and a broker
failure is logged as ``EVENT_PUBLISH_FAILED``, never raised into the business operation
(docs/spec.md §7: the trade-off is a lost event, which the log line makes visible)."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from datetime import datetime

from django.conf import settings
from django.utils import timezone

from common.handoff import after_commit, send_now
from common.json_types import JsonObject
from config.task_names import EVENTS_DELIVER
from events.envelope import Envelope, event_id_new, occurred_at_format
from events.models import KEY_MAX_LENGTH
from events.registry import EventType, P

logger = logging.getLogger(__name__)

EVENTS_QUEUE = "events"

EventTransport = Callable[[JsonObject], None]


class EventPayloadInvalid(ValueError):
    """The producer's payload does not fit the declared schema: a programming error, raised
    at the call so it fails in tests, not in a consumer."""


def broker_send(message: JsonObject) -> None:
    """Send one envelope as an ``events.event_deliver`` message on the ``events`` queue; a
    refusal raises, for ``event_send`` to record."""
    send_now(EVENTS_DELIVER, message, queue=EVENTS_QUEUE)


def transport_current() -> EventTransport:
    """How envelopes leave this process: the Celery broker (a test replaces this function
    to record them, or to stand a refusing broker in)."""
    return broker_send


def event_publish(
    event_type: EventType[P],
    *,
    idempotency_key: str,
    payload: P,
    occurred_at: datetime | None = None,
) -> Envelope:
    """Build the envelope now and send it after the surrounding transaction commits (at once
    outside one). ``idempotency_key`` names the business fact: the same fact, the same key.
    Build ``payload`` with the schema's constructor (``DeviceStatusChangedPayload(...)``) so
    mypy checks it against the event type."""
    if not idempotency_key or len(idempotency_key) > KEY_MAX_LENGTH:
        raise ValueError(f"idempotency_key must be 1..{KEY_MAX_LENGTH} characters")
    copied = json.loads(json.dumps(payload))
    errors = event_type.payload_errors(copied, allow_extra=False)
    if errors:
        raise EventPayloadInvalid(f"{event_type.name} payload: {'; '.join(errors)}")
    envelope = Envelope(
        event_id=event_id_new(),
        idempotency_key=idempotency_key,
        type=event_type.name,
        occurred_at=occurred_at_format(occurred_at or timezone.now()),
        producer=settings.EVENT_PRODUCER,
        version=event_type.version,
        payload=copied,
    )
    event_send_on_commit(envelope)
    return envelope


def event_send_on_commit(
    envelope: Envelope, *, on_failure: Callable[[], None] | None = None
) -> None:
    """Send ``envelope`` once the current transaction commits; ``on_failure`` runs if the
    broker refused it (the business data is committed by then either way)."""
    transport = transport_current()

    def send() -> None:
        if not event_send(envelope, transport) and on_failure is not None:
            on_failure()

    after_commit(send)


def event_send(envelope: Envelope, transport: EventTransport) -> bool:
    """One send attempt (the broker client retries briefly itself); False when it failed."""
    try:
        transport(envelope.to_message())
    except Exception as exc:
        logger.error(
            "EVENT_PUBLISH_FAILED type=%s idempotency_key=%s event_id=%s error=%r",
            envelope.type,
            envelope.idempotency_key,
            envelope.event_id,
            exc,
            extra={
                "eventType": envelope.type,
                "idempotencyKey": envelope.idempotency_key,
                "eventId": envelope.event_id,
                "error": repr(exc),
            },
        )
        return False
    return True
