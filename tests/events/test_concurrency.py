"""Several workers delivering the same event at once: the inbox row, inserted before the
handler's effect in the same transaction, makes the others wait and then skip."""

from __future__ import annotations

import threading
import time
import uuid

import pytest
from django.db import connection

from events.services import event_deliver, event_publish
from events.states import HandlerOutcome
from tests.common.factories import OrganizationFactory
from tests.events.conftest import effects

WORKERS = 4


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_concurrent_deliveries_of_one_event_run_the_handler_once(
    event_registry, ping, sent
) -> None:
    calls: list[int] = []

    @event_registry.handler(ping, name="test.slow")
    def slow(event) -> None:
        calls.append(1)
        OrganizationFactory(name=f"test.slow|{event.idempotency_key}|{uuid.uuid4().hex}")
        time.sleep(0.3)  # hold the inbox row's lock while the others arrive

    event_publish(ping, idempotency_key="ping:race", payload={"farm": "f", "level": 1})
    barrier = threading.Barrier(WORKERS)
    outcomes: list[str] = []

    def deliver() -> None:
        try:
            barrier.wait(timeout=10)
            outcomes.append(event_deliver(message=sent[0]).outcomes["test.slow"])
        finally:
            connection.close()

    threads = [threading.Thread(target=deliver) for _ in range(WORKERS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)

    assert sorted(outcomes) == sorted(
        [HandlerOutcome.DONE] + [HandlerOutcome.DUPLICATE] * (WORKERS - 1)
    )
    assert calls == [1]
    assert effects("test.slow", "ping:race") == 1
