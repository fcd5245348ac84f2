"""Versions: an older envelope reaches each handler in a version it accepts (upcast through
the registry), an unknown newer one is dead-lettered with a clear reason, and the registry
refuses declarations that would leave a version unroutable."""

from __future__ import annotations

from typing import Any, TypedDict

import pytest
from django.core.exceptions import ImproperlyConfigured

from events.models import EventDeadLetter
from events.states import HandlerOutcome
from tests.events.conftest import dead_letter_lines

pytestmark = pytest.mark.django_db


class ReadingV3(TypedDict):
    sensor: str
    celsius: float
    quality: str


def v1_to_v2(payload: dict[str, Any]) -> dict[str, Any]:
    """v1 named the sensor ``device``."""
    return {"sensor": payload["device"], "celsius": payload["celsius"]}


def v2_to_v3(payload: dict[str, Any]) -> dict[str, Any]:
    """v3 added ``quality``; older readings were all measured."""
    return {**payload, "quality": "measured"}


@pytest.fixture
def reading(event_registry):
    return event_registry.declare(
        "test.Reading",
        version=3,
        schema=ReadingV3,
        description="A test reading.",
        upcasters={1: v1_to_v2, 2: v2_to_v3},
    )


def envelope(version: int, payload: dict[str, Any], key: str = "reading:1") -> dict[str, Any]:
    return {
        "event_id": f"e-{version}",
        "idempotency_key": key,
        "type": "test.Reading",
        "occurred_at": "2026-03-01T08:00:00.000000Z",
        "producer": "older-deployment",
        "version": version,
        "payload": payload,
    }


def test_an_old_envelope_is_upcast_to_the_version_each_handler_accepts(
    reading, make_handler, deliver
) -> None:
    current = make_handler(reading, "test.current")
    tolerant = make_handler(reading, "test.tolerant", versions=(2, 3))

    result = deliver(envelope(1, {"device": "T-1", "celsius": 21.5}))

    assert result.outcomes == {"test.current": HandlerOutcome.DONE, "test.tolerant": "done"}
    (seen,) = current.seen
    assert (seen.version, seen.payload) == (
        3,
        {"sensor": "T-1", "celsius": 21.5, "quality": "measured"},
    )
    (seen,) = tolerant.seen
    assert (seen.version, seen.payload) == (2, {"sensor": "T-1", "celsius": 21.5})


def test_an_accepted_old_version_reaches_the_handler_unchanged(
    reading, make_handler, deliver
) -> None:
    tolerant = make_handler(reading, "test.tolerant", versions=(2, 3))
    deliver(envelope(2, {"sensor": "T-2", "celsius": 19}))
    assert tolerant.seen[0].payload == {"sensor": "T-2", "celsius": 19}


def test_an_unknown_newer_version_is_dead_lettered_with_the_reason(
    reading, make_handler, deliver, caplog
) -> None:
    handler = make_handler(reading, "test.current")
    message = envelope(4, {"sensor": "T-1", "celsius": 20, "quality": "x", "unit": "C"})

    result = deliver(message)
    deliver({**message, "event_id": "e-again"})  # a redelivery adds nothing

    assert result.outcomes == {"*": HandlerOutcome.DEAD_LETTERED}
    assert handler.calls == 0
    dead = EventDeadLetter.objects.get()
    assert (dead.reason, dead.handler, dead.event_type) == ("unknown_version", "*", "test.Reading")
    assert "version 4 is newer than test.Reading v3" in dead.last_error
    assert dead.envelope == message
    assert len(dead_letter_lines(caplog, "reason=unknown_version")) == 1


def test_a_failing_upcaster_dead_letters_the_event_for_that_handler(
    reading, make_handler, deliver
) -> None:
    make_handler(reading, "test.current")
    result = deliver(envelope(1, {"celsius": 20}))  # v1 without ``device``
    assert result.outcomes == {"test.current": HandlerOutcome.DEAD_LETTERED}
    dead = EventDeadLetter.objects.get()
    assert dead.reason == "invalid_payload"
    assert "upcast of test.Reading v1 failed" in dead.last_error


def test_the_registry_refuses_unroutable_declarations(event_registry, reading) -> None:
    with pytest.raises(ImproperlyConfigured, match=r"upcasters must cover versions 1\.\.1"):
        event_registry.declare("test.Gap", version=2, schema=ReadingV3, description="")
    with pytest.raises(ImproperlyConfigured, match="must include 3"):
        event_registry.handler(reading, name="test.stale", versions=(1, 2))(lambda e: None)
    with pytest.raises(ImproperlyConfigured, match="not declared"):
        event_registry.handler("test.Nothing", name="test.lost")(lambda e: None)

    def first(event) -> None: ...

    def second(event) -> None: ...

    event_registry.handler(reading, name="test.same")(first)
    event_registry.handler(reading, name="test.same")(first)  # a re-import is harmless
    with pytest.raises(ImproperlyConfigured, match="registered twice"):
        event_registry.handler(reading, name="test.same")(second)
