"""Consuming: one envelope, routed to the handlers registered for its type. Each handler runs
in its own transaction together with its inbox row, so its effect happens once per business
fact; a failure is counted per (handler, key) and ends in a dead letter after
``EVENT_MAX_ATTEMPTS``, without touching the other handlers."""

from __future__ import annotations

import copy
import hashlib
import json
import logging
import random
import traceback
from dataclasses import dataclass, replace
from datetime import datetime

from django.conf import settings
from django.db import transaction
from django.db.models import F
from django.utils import timezone

from common.sql import insert_ignore_returning
from events.envelope import Envelope, EnvelopeMalformed
from events.models import EventHandlerAttempt, EventInbox
from events.registry import EventHandler, EventRejected, EventType, P, registry
from events.selectors import dead_letter_is_open, inbox_has
from events.services.dead_letters import LAST_ERROR_MAX_CHARS, dead_letter_record
from events.states import EVENT_LEVEL_HANDLER, DeadLetterReason, HandlerOutcome

logger = logging.getLogger(__name__)

RETRY_JITTER_RATIO = 0.2


@dataclass(frozen=True)
class DeliveryResult:
    idempotency_key: str
    outcomes: dict[str, HandlerOutcome]
    failed_attempts: int = 0  # the highest attempt count among handlers to retry

    @property
    def retry_needed(self) -> bool:
        return HandlerOutcome.FAILED in self.outcomes.values()


def event_retry_delay_s(attempt: int) -> float:
    """Countdown before redelivery after failed attempt ``attempt`` (1-based), with jitter."""
    ladder = settings.EVENT_RETRY_BACKOFF_S
    base = float(ladder[min(max(attempt, 1), len(ladder)) - 1])
    return base * random.uniform(1 - RETRY_JITTER_RATIO, 1 + RETRY_JITTER_RATIO)


def event_deliver(*, message: object, now: datetime | None = None) -> DeliveryResult:
    """Run every registered handler of the event's type that has not handled its key yet.

    An unknown type or a version newer than the registry knows is dead-lettered as a whole
    (handler ``*``): replaying it after the consumer is upgraded delivers it. A known type
    with no handler is acknowledged as done.
    """
    now = now or timezone.now()
    try:
        event = Envelope.from_message(message)
    except EnvelopeMalformed as exc:
        return _malformed(message, str(exc), now)
    declared = registry.type_get(event.type)
    if declared is None:
        why = f"event type {event.type!r} is not declared in this consumer"
        return _event_rejected(event, DeadLetterReason.UNKNOWN_TYPE, why, now)
    if event.version > declared.version:
        why = (
            f"version {event.version} is newer than {declared.name} v{declared.version}, "
            "the newest this consumer knows"
        )
        return _event_rejected(event, DeadLetterReason.UNKNOWN_VERSION, why, now)
    outcomes: dict[str, HandlerOutcome] = {}
    highest = 0
    for handler in registry.handlers_for(event.type):
        outcome, attempts = handler_run(handler=handler, event=event, declared=declared, now=now)
        outcomes[handler.name] = outcome
        if outcome == HandlerOutcome.FAILED:
            highest = max(highest, attempts)
    return DeliveryResult(event.idempotency_key, outcomes, highest)


def handler_run(
    *, handler: EventHandler, event: Envelope, declared: EventType[P], now: datetime
) -> tuple[HandlerOutcome, int]:
    """One handler, one event: (outcome, failed attempts so far)."""
    key = event.idempotency_key
    if inbox_has(handler=handler.name, idempotency_key=key):
        return HandlerOutcome.DUPLICATE, 0
    if dead_letter_is_open(handler=handler.name, idempotency_key=key):
        return HandlerOutcome.PARKED, 0
    delivered, problem = _as_accepted(event, declared, handler.versions)
    if delivered is None:
        return _handler_gave_up(handler, event, DeadLetterReason.INVALID_PAYLOAD, problem, 1, now)
    inbox_row = {
        "handler": handler.name,
        "idempotency_key": key,
        "event_type": event.type,
        "event_id": event.event_id,
        "version": event.version,
        "processed_at": now,
    }
    try:
        with transaction.atomic():
            if not insert_ignore_returning(EventInbox, [inbox_row]):
                return HandlerOutcome.DUPLICATE, 0  # a concurrent delivery committed first
            handler.fn(delivered)
    except EventRejected as exc:
        reason = DeadLetterReason.HANDLER_REJECTED
        with transaction.atomic():
            attempts = _attempt_count(handler, event, exc, now)
            return _handler_gave_up(handler, event, reason, _error_text(exc), attempts, now)
    except Exception as exc:
        return _handler_failed(handler, event, exc, now)
    logger.info(
        "event %s %s handled by %s",
        event.type,
        event.event_id,
        handler.name,
        extra={"eventId": event.event_id, "idempotencyKey": key, "handler": handler.name},
    )
    return HandlerOutcome.DONE, 0


def _as_accepted(
    event: Envelope, declared: EventType[P], accepts: frozenset[int]
) -> tuple[Envelope | None, str]:
    """The envelope upcast to a version the handler accepts, or None and why not."""
    payload = copy.deepcopy(event.payload)
    try:
        version = declared.upcast(event.version, payload, accepts)
    except Exception as exc:
        return None, f"upcast of {event.type} v{event.version} failed: {_error_text(exc)}"
    if version == declared.version:
        errors = declared.payload_errors(payload, allow_extra=True)
        if errors:
            return None, f"{event.type} v{version} payload: {'; '.join(errors)}"
    return replace(event, version=version, payload=payload), ""


def _attempt_count(
    handler: EventHandler, event: Envelope, exc: BaseException, now: datetime
) -> int:
    """Count one failed attempt of (handler, key), across redeliveries and republishes."""
    key = event.idempotency_key
    message = event.to_message()
    error = _error_text(exc)
    insert_ignore_returning(
        EventHandlerAttempt,
        [
            {
                "handler": handler.name,
                "idempotency_key": key,
                "event_type": event.type,
                "attempts": 0,
                "last_error": "",
                "envelope": message,
                "first_failed_at": now,
                "last_failed_at": now,
            }
        ],
    )
    rows = EventHandlerAttempt.objects.filter(handler=handler.name, idempotency_key=key)
    rows.update(attempts=F("attempts") + 1, last_error=error, envelope=message, last_failed_at=now)
    return int(rows.values_list("attempts", flat=True).get())


def _handler_failed(
    handler: EventHandler, event: Envelope, exc: Exception, now: datetime
) -> tuple[HandlerOutcome, int]:
    with transaction.atomic():
        attempts = _attempt_count(handler, event, exc, now)
        if attempts >= settings.EVENT_MAX_ATTEMPTS:
            reason = DeadLetterReason.RETRIES_EXHAUSTED
            return _handler_gave_up(handler, event, reason, _error_text(exc), attempts, now)
    logger.warning(
        "event handler %s failed on %s %s (attempt %d of %d): %s",
        handler.name,
        event.type,
        event.idempotency_key,
        attempts,
        settings.EVENT_MAX_ATTEMPTS,
        _error_headline(exc),
        extra={"eventId": event.event_id, "idempotencyKey": event.idempotency_key},
    )
    return HandlerOutcome.FAILED, attempts


def _handler_gave_up(
    handler: EventHandler,
    event: Envelope,
    reason: DeadLetterReason,
    error: str,
    attempts: int,
    now: datetime,
) -> tuple[HandlerOutcome, int]:
    with transaction.atomic():
        dead_letter_record(
            message=event.to_message(),
            event_type=event.type,
            idempotency_key=event.idempotency_key,
            handler=handler.name,
            reason=reason,
            attempts=attempts,
            last_error=error,
            now=now,
        )
    return HandlerOutcome.DEAD_LETTERED, attempts


def _event_rejected(
    event: Envelope, reason: DeadLetterReason, why: str, now: datetime
) -> DeliveryResult:
    with transaction.atomic():
        dead_letter_record(
            message=event.to_message(),
            event_type=event.type,
            idempotency_key=event.idempotency_key,
            handler=EVENT_LEVEL_HANDLER,
            reason=reason,
            attempts=1,
            last_error=why,
            now=now,
        )
    return DeliveryResult(
        event.idempotency_key, {EVENT_LEVEL_HANDLER: HandlerOutcome.DEAD_LETTERED}
    )


def _malformed(message: object, why: str, now: datetime) -> DeliveryResult:
    """Not an envelope: keyed by a hash of its content, so a redelivery adds nothing."""
    stored = message if isinstance(message, dict) else {"raw": repr(message)}
    digest = hashlib.sha256(
        json.dumps(stored, sort_keys=True, default=repr).encode("utf-8")
    ).hexdigest()
    key = f"malformed:{digest}"
    event_type = stored.get("type")
    with transaction.atomic():
        dead_letter_record(
            message=stored,
            event_type=event_type if isinstance(event_type, str) else "",
            idempotency_key=key,
            handler=EVENT_LEVEL_HANDLER,
            reason=DeadLetterReason.MALFORMED_ENVELOPE,
            attempts=1,
            last_error=why,
            now=now,
        )
    return DeliveryResult(key, {EVENT_LEVEL_HANDLER: HandlerOutcome.DEAD_LETTERED})


def _error_headline(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


def _error_text(exc: BaseException) -> str:
    """The traceback's tail: what an operator reading a dead letter needs first."""
    return "".join(traceback.format_exception(exc))[-LAST_ERROR_MAX_CHARS:]
