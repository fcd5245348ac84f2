"""Support's dead-letter admin: the replay action sends the envelope again."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client
from django.utils import timezone

from events.models import EventDeadLetter
from tests.events.transport import event_transport

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("clock_at_fixture_dates")]


def test_dead_letter_replay_action(support: Client, django_capture_on_commit_callbacks) -> None:
    envelope = {
        "event_id": "e1",
        "idempotency_key": "k1",
        "type": "test.Ping",
        "occurred_at": "2026-01-01T00:00:00.000000Z",
        "producer": "test",
        "version": 1,
        "payload": {},
    }
    dead = EventDeadLetter.objects.create(
        envelope=envelope,
        event_type="test.Ping",
        idempotency_key="k1",
        handler="h",
        reason="retries_exhausted",
        created_at=timezone.now(),
    )
    sent: list[dict[str, Any]] = []
    with event_transport(sent.append), django_capture_on_commit_callbacks(execute=True):
        support.post(
            "/admin/events/eventdeadletter/",
            {"action": "replay", "_selected_action": [str(dead.pk)]},
        )
    dead.refresh_from_db()
    assert dead.status == "replayed" and dead.replayed_by == "support"
    assert [m["idempotency_key"] for m in sent] == ["k1"]
