"""Consuming: each handler's effect happens once per business fact however often the event
arrives; a crash leaves nothing behind; five failures make one dead letter and one alert;
replay after the fix runs the handler once."""

from __future__ import annotations

import logging

import pytest
from django.core.management import call_command

from events.models import EventDeadLetter, EventHandlerAttempt, EventInbox
from events.registry import EventRejected
from events.selectors import dead_letter_counts, handler_attempts
from events.services import dead_letter_replay, event_publish
from events.states import HandlerOutcome
from tests.events.conftest import dead_letter_lines, effects

Outcome = HandlerOutcome
pytestmark = pytest.mark.django_db

PAYLOAD = {"farm": "north", "level": 2}


def publish(ping, key: str, django_capture_on_commit_callbacks) -> None:
    with django_capture_on_commit_callbacks(execute=True):
        event_publish(ping, idempotency_key=key, payload=PAYLOAD)


def test_three_deliveries_and_a_republish_run_each_handler_once(
    ping, sent, make_handler, deliver, django_capture_on_commit_callbacks
) -> None:
    make_handler(ping, "test.audit")
    make_handler(ping, "test.notify")
    publish(ping, "ping:once", django_capture_on_commit_callbacks)
    publish(ping, "ping:once", django_capture_on_commit_callbacks)  # the producer republishes
    original, republished = sent
    assert original["event_id"] != republished["event_id"]

    results = [deliver(m) for m in (original, original, original, republished)]

    assert results[0].outcomes == {"test.audit": Outcome.DONE, "test.notify": Outcome.DONE}
    for later in results[1:]:
        assert later.outcomes == {"test.audit": Outcome.DUPLICATE, "test.notify": Outcome.DUPLICATE}
        assert not later.retry_needed
    assert effects("test.audit", "ping:once") == 1
    assert effects("test.notify", "ping:once") == 1
    assert EventInbox.objects.filter(idempotency_key="ping:once").count() == 2


def test_a_crash_mid_handler_leaves_no_inbox_row_and_no_effect(
    ping, sent, make_handler, deliver, django_capture_on_commit_callbacks
) -> None:
    crashing = make_handler(ping, "test.crashing")
    crashing.broken = True
    make_handler(ping, "test.fine")
    publish(ping, "ping:crash", django_capture_on_commit_callbacks)

    result = deliver(sent[0])

    assert result.outcomes == {"test.crashing": Outcome.FAILED, "test.fine": Outcome.DONE}
    assert result.retry_needed and result.failed_attempts == 1
    assert crashing.calls == 1
    assert effects("test.crashing", "ping:crash") == 0  # its row was written, then rolled back
    assert not EventInbox.objects.filter(handler="test.crashing").exists()
    assert effects("test.fine", "ping:crash") == 1
    attempt = EventHandlerAttempt.objects.get(handler="test.crashing")
    assert attempt.attempts == 1
    assert "RuntimeError: test.crashing is broken" in attempt.last_error


def test_five_failures_make_one_dead_letter_and_one_alert(
    ping, sent, make_handler, deliver, caplog, event_registry, django_capture_on_commit_callbacks
) -> None:
    alerts = []
    event_registry.dead_letter_listener(alerts.append)
    failing = make_handler(ping, "test.failing")
    failing.broken = True
    make_handler(ping, "test.other")
    publish(ping, "ping:dead", django_capture_on_commit_callbacks)
    caplog.set_level(logging.WARNING)

    outcomes = [deliver(sent[0]).outcomes["test.failing"] for _ in range(7)]

    assert outcomes == [Outcome.FAILED] * 4 + [Outcome.DEAD_LETTERED] + [Outcome.PARKED] * 2
    assert failing.calls == 5
    dead = EventDeadLetter.objects.get()
    assert (dead.handler, dead.reason, dead.attempts, dead.status) == (
        "test.failing",
        "retries_exhausted",
        5,
        "open",
    )
    assert dead.envelope == sent[0]
    assert "RuntimeError: test.failing is broken" in dead.last_error
    assert len(dead_letter_lines(caplog, "ping:dead")) == 1
    assert [(a.handler, a.reason, a.dead_letter_id) for a in alerts] == [
        ("test.failing", "retries_exhausted", dead.pk)
    ]
    assert effects("test.other", "ping:dead") == 1  # the healthy handler was not held back
    assert [(c.event_type, c.handler, c.reason, c.count) for c in dead_letter_counts()] == [
        ("test.Ping", "test.failing", "retries_exhausted", 1)
    ]


def test_a_republished_event_continues_the_attempt_count(
    ping, sent, make_handler, deliver, django_capture_on_commit_callbacks
) -> None:
    make_handler(ping, "test.failing").broken = True
    publish(ping, "ping:count", django_capture_on_commit_callbacks)
    publish(ping, "ping:count", django_capture_on_commit_callbacks)
    for _ in range(3):
        deliver(sent[0])
    assert handler_attempts(handler="test.failing", idempotency_key="ping:count") == 3

    outcomes = [deliver(sent[1]).outcomes["test.failing"] for _ in range(2)]

    assert outcomes == [Outcome.FAILED, Outcome.DEAD_LETTERED]
    assert EventDeadLetter.objects.get().envelope["event_id"] == sent[1]["event_id"]


def test_replay_after_the_fix_runs_the_handler_exactly_once(
    ping, sent, make_handler, deliver, caplog, django_capture_on_commit_callbacks
) -> None:
    failing = make_handler(ping, "test.failing")
    failing.broken = True
    make_handler(ping, "test.other")
    publish(ping, "ping:replay", django_capture_on_commit_callbacks)
    for _ in range(5):
        deliver(sent[0])
    dead = EventDeadLetter.objects.get()
    failing.broken = False  # the fix is deployed

    with django_capture_on_commit_callbacks(execute=True):
        replayed = dead_letter_replay(dead_letter_id=dead.pk, actor="bob")
        again = dead_letter_replay(dead_letter_id=dead.pk, actor="bob")
    assert replayed is not None and again is None
    replay_message = sent[-1]
    assert replay_message["idempotency_key"] == "ping:replay"
    assert replay_message["event_id"] not in {sent[0]["event_id"]}
    assert replay_message["event_id"] == replayed.event_id

    first = deliver(replay_message)
    second = deliver(replay_message)

    assert first.outcomes == {"test.failing": Outcome.DONE, "test.other": Outcome.DUPLICATE}
    assert second.outcomes == {"test.failing": Outcome.DUPLICATE, "test.other": Outcome.DUPLICATE}
    assert effects("test.failing", "ping:replay") == 1
    assert effects("test.other", "ping:replay") == 1
    dead.refresh_from_db()
    assert (dead.status, dead.replayed_by, dead.replay_event_id) == (
        "replayed",
        "bob",
        replayed.event_id,
    )
    assert dead.replayed_at is not None
    assert dead_letter_counts() == []
    assert len(dead_letter_lines(caplog)) == 1


def test_a_replay_that_still_fails_gets_a_fresh_budget_and_a_new_dead_letter(
    ping, sent, make_handler, deliver, django_capture_on_commit_callbacks
) -> None:
    make_handler(ping, "test.failing").broken = True
    publish(ping, "ping:again", django_capture_on_commit_callbacks)
    for _ in range(5):
        deliver(sent[0])
    with django_capture_on_commit_callbacks(execute=True):
        dead_letter_replay(dead_letter_id=EventDeadLetter.objects.get().pk, actor="bob")

    outcomes = [deliver(sent[-1]).outcomes["test.failing"] for _ in range(5)]

    assert outcomes == [Outcome.FAILED] * 4 + [Outcome.DEAD_LETTERED]
    assert sorted(EventDeadLetter.objects.values_list("status", flat=True)) == [
        "open",
        "replayed",
    ]


def test_a_handler_rejecting_an_event_dead_letters_it_without_retries(
    ping, sent, event_registry, deliver, django_capture_on_commit_callbacks
) -> None:
    @event_registry.handler(ping, name="test.strict")
    def strict(event) -> None:
        raise EventRejected("farm north is unknown here")

    publish(ping, "ping:reject", django_capture_on_commit_callbacks)
    result = deliver(sent[0])

    assert result.outcomes == {"test.strict": Outcome.DEAD_LETTERED}
    assert not result.retry_needed
    dead = EventDeadLetter.objects.get()
    assert (dead.reason, dead.attempts) == ("handler_rejected", 1)
    assert "farm north is unknown here" in dead.last_error


def test_an_unknown_type_is_dead_lettered_once(deliver, caplog, sent, ping) -> None:
    message = {
        "event_id": "e-1",
        "idempotency_key": "mystery:1",
        "type": "FromTheFuture",
        "occurred_at": "2026-01-01T00:00:00.000000Z",
        "producer": "elsewhere",
        "version": 1,
        "payload": {},
    }
    first = deliver(message)
    second = deliver({**message, "event_id": "e-2"})

    assert first.outcomes == {"*": Outcome.DEAD_LETTERED}
    assert second.outcomes == {"*": Outcome.DEAD_LETTERED}
    dead = EventDeadLetter.objects.get()
    assert (dead.reason, dead.handler, dead.event_type) == ("unknown_type", "*", "FromTheFuture")
    assert "'FromTheFuture' is not declared" in dead.last_error
    assert len(dead_letter_lines(caplog, "mystery:1")) == 1


def test_a_malformed_message_is_dead_lettered_and_cannot_be_replayed(deliver) -> None:
    result = deliver({"type": "test.Ping", "payload": "not an object"})

    assert result.outcomes == {"*": Outcome.DEAD_LETTERED}
    dead = EventDeadLetter.objects.get()
    assert dead.reason == "malformed_envelope"
    assert dead.idempotency_key.startswith("malformed:")
    assert "missing event_id" in dead.last_error
    with pytest.raises(Exception, match="not replayable"):
        call_command("dlq", "replay", str(dead.pk))


def test_a_payload_that_breaks_the_schema_is_dead_lettered(
    ping, sent, make_handler, deliver, django_capture_on_commit_callbacks
) -> None:
    handler = make_handler(ping, "test.audit")
    publish(ping, "ping:bad", django_capture_on_commit_callbacks)
    message = {**sent[0], "payload": {"farm": "north"}}

    assert deliver(message).outcomes == {"test.audit": Outcome.DEAD_LETTERED}
    assert handler.calls == 0
    dead = EventDeadLetter.objects.get()
    assert dead.reason == "invalid_payload"
    assert "level: missing" in dead.last_error


def test_a_known_type_without_handlers_is_acknowledged(
    ping, sent, deliver, django_capture_on_commit_callbacks
) -> None:
    publish(ping, "ping:nobody", django_capture_on_commit_callbacks)
    result = deliver(sent[0])
    assert result.outcomes == {}
    assert not result.retry_needed
    assert not EventDeadLetter.objects.exists()
