"""Vocabularies of the event bus as plain constants (no database)."""

from __future__ import annotations

from django.db.models import TextChoices


class DeadLetterStatus(TextChoices):
    OPEN = "open"
    REPLAYED = "replayed"


# A replay whose publish failed reopens the dead letter, so the operator can try again.
DEAD_LETTER_TRANSITIONS: dict[str, frozenset[str]] = {
    DeadLetterStatus.OPEN: frozenset({DeadLetterStatus.REPLAYED}),
    DeadLetterStatus.REPLAYED: frozenset({DeadLetterStatus.OPEN}),
}


class DeadLetterReason(TextChoices):
    """Why an event (or one handler's share of it) stopped being retried."""

    RETRIES_EXHAUSTED = "retries_exhausted"
    HANDLER_REJECTED = "handler_rejected"
    UNKNOWN_TYPE = "unknown_type"
    UNKNOWN_VERSION = "unknown_version"
    INVALID_PAYLOAD = "invalid_payload"
    MALFORMED_ENVELOPE = "malformed_envelope"


# Dead letters that replaying cannot cure: the same bytes would be rejected again.
DEAD_LETTER_NOT_REPLAYABLE: frozenset[str] = frozenset({DeadLetterReason.MALFORMED_ENVELOPE})


class HandlerOutcome(TextChoices):
    """What one delivery did for one handler."""

    DONE = "done"
    DUPLICATE = "duplicate"  # inbox row already there: an earlier delivery did the work
    PARKED = "parked"  # an open dead letter holds this (handler, key) until it is replayed
    FAILED = "failed"  # counted an attempt; the delivery will be retried
    DEAD_LETTERED = "dead_lettered"


# The handler name on a dead letter that concerns the event as a whole (no handler ran).
EVENT_LEVEL_HANDLER = "*"
