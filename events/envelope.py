"""The wire format of every domain event (docs/spec.md §7), validated at the consumer's edge."""

from __future__ import annotations

import uuid
from dataclasses import asdict, dataclass, replace
from datetime import UTC, datetime
from typing import Any

ENVELOPE_FIELDS = (
    "event_id",
    "idempotency_key",
    "type",
    "occurred_at",
    "producer",
    "version",
    "payload",
)


class EnvelopeMalformed(ValueError):
    """A message that is not an envelope; it can be neither deduplicated nor routed."""


def event_id_new() -> str:
    return str(uuid.uuid4())


def occurred_at_format(moment: datetime) -> str:
    """UTC ISO-8601 with microseconds and a ``Z``, as in the device contract."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


@dataclass(frozen=True)
class Envelope:
    """``event_id`` is new per publish; ``idempotency_key`` is stable per business fact, and
    consumers deduplicate by it."""

    event_id: str
    idempotency_key: str
    type: str
    occurred_at: str
    producer: str
    version: int
    payload: dict[str, Any]

    def to_message(self) -> dict[str, Any]:
        return asdict(self)

    def republished(self) -> Envelope:
        """The same business fact sent again: same key, new ``event_id``."""
        return replace(self, event_id=event_id_new())

    @classmethod
    def from_message(cls, message: object) -> Envelope:
        if not isinstance(message, dict):
            raise EnvelopeMalformed(f"expected an object, got {type(message).__name__}")
        missing = [name for name in ENVELOPE_FIELDS if name not in message]
        if missing:
            raise EnvelopeMalformed(f"missing {', '.join(missing)}")
        for name in ("event_id", "idempotency_key", "type", "occurred_at", "producer"):
            if not isinstance(message[name], str) or not message[name]:
                raise EnvelopeMalformed(f"{name} must be a non-empty string")
        version = message["version"]
        if not isinstance(version, int) or isinstance(version, bool) or version < 1:
            raise EnvelopeMalformed("version must be an integer >= 1")
        if not isinstance(message["payload"], dict):
            raise EnvelopeMalformed("payload must be an object")
        return cls(**{name: message[name] for name in ENVELOPE_FIELDS})
