"""`manage.py dlq`: operators list, inspect and replay dead letters."""

from __future__ import annotations

import io

import pytest
from django.core.management import CommandError, call_command

from events.models import EventDeadLetter
from events.services import event_publish
from tests.events.conftest import effects
from tests.events.transport import event_transport

pytestmark = pytest.mark.django_db


def dlq(*args: str) -> str:
    out = io.StringIO()
    call_command("dlq", *args, stdout=out)
    return out.getvalue()


@pytest.fixture
def dead_letter(ping, sent, make_handler, deliver, django_capture_on_commit_callbacks):
    handler = make_handler(ping, "test.failing")
    handler.broken = True
    with django_capture_on_commit_callbacks(execute=True):
        event_publish(ping, idempotency_key="ping:dlq", payload={"farm": "west", "level": 7})
    for _ in range(5):
        deliver(sent[0])
    return EventDeadLetter.objects.get(), handler


def test_list_prints_a_table_of_open_dead_letters(dead_letter) -> None:
    dead, _ = dead_letter
    lines = dlq("list").splitlines()
    assert lines[0].split() == [
        "id",
        "status",
        "created",
        "type",
        "handler",
        "reason",
        "attempts",
        "key",
    ]
    row = lines[1].split()
    assert row[0] == str(dead.pk)
    assert row[1] == "open"
    assert row[4:] == ["test.Ping", "test.failing", "retries_exhausted", "5", "ping:dlq"]
    assert lines[-1] == "(1 dead letter)"
    assert dlq("list", "--status", "replayed").splitlines()[-1] == "(0 dead letters)"


def test_show_prints_the_envelope_and_the_last_error(dead_letter) -> None:
    dead, _ = dead_letter
    text = dlq("show", str(dead.pk))
    assert "reason:          retries_exhausted" in text
    assert "replayed:        no" in text
    assert '"idempotency_key": "ping:dlq"' in text
    assert '"level": 7' in text
    assert "RuntimeError: test.failing is broken" in text
    with pytest.raises(CommandError, match="no dead letter"):
        dlq("show", "999999")


def test_replay_republishes_once_and_records_who(
    dead_letter, sent, deliver, django_capture_on_commit_callbacks
) -> None:
    dead, handler = dead_letter
    handler.broken = False
    with django_capture_on_commit_callbacks(execute=True):
        out = dlq("replay", str(dead.pk), "--by", "carol")
    assert f"replayed dead letter {dead.pk} as event {sent[-1]['event_id']}" in out
    assert "by carol" in out
    with pytest.raises(CommandError, match="already replayed"):
        dlq("replay", str(dead.pk))

    deliver(sent[-1])
    deliver(sent[-1])

    assert effects("test.failing", "ping:dlq") == 1
    assert "replayed:        " in (shown := dlq("show", str(dead.pk)))
    assert "by carol as event" in shown
    assert dlq("list", "--status", "all").splitlines()[1].split()[1] == "replayed"


@pytest.mark.django_db(transaction=True)
def test_a_replay_that_cannot_be_published_leaves_the_dead_letter_open(
    dead_letter, dead_broker
) -> None:
    """Real commits: the command's transaction commits, then the publish fails."""
    dead, _ = dead_letter
    with (
        event_transport(dead_broker),
        pytest.raises(CommandError, match="could not be published"),
    ):
        dlq("replay", str(dead.pk), "--by", "carol")
    dead.refresh_from_db()
    assert (dead.status, dead.replayed_by, dead.replayed_at) == ("open", "", None)
