"""Delivery through the configured broker with an in-process worker on the ``events`` queue:
redelivered and republished events run each handler once; a handler failing on every
attempt is retried by Celery with backoff, dead-lettered once, and replayed once fixed."""

from __future__ import annotations

import io
import logging
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from django.core.management import call_command

from config.celery import app as celery_app
from devices.services import device_status_change
from devtools.runtime import in_process_worker
from events.models import EventDeadLetter, EventInbox
from events.services import event_publish
from events.services.publish import EVENTS_QUEUE, transport_current
from tests.devices.factories import DeviceFactory
from tests.events.conftest import PingPayload, dead_letter_lines, effects
from tests.waiting import wait_for

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def worker(settings: Any) -> Iterator[None]:
    """One worker thread, so the ``events`` queue is consumed in order: once a later
    sentinel event is handled, every message sent before it has been."""
    settings.EVENT_RETRY_BACKOFF_S = (0.05, 0.1)
    with celery_app.connection_for_write() as conn:
        conn.default_channel.queue_purge(EVENTS_QUEUE)  # stale messages of earlier runs
    with in_process_worker(concurrency=1):
        yield


@pytest.fixture
def sentinel(event_registry, ping, make_handler) -> Callable[[str], None]:
    """Publish an event of its own type and wait until it is handled."""
    marker = event_registry.declare("test.Sentinel", schema=PingPayload, description="Marker.")
    make_handler(marker, "test.sentinel")

    def send_and_wait(key: str) -> None:
        event_publish(marker, idempotency_key=key, payload={"farm": "sentinel", "level": 0})
        wait_for(lambda: effects("test.sentinel", key), f"sentinel {key}")

    return send_and_wait


def test_redelivered_and_republished_events_run_each_handler_once(
    make_handler, sentinel, worker
) -> None:
    audit = make_handler("DeviceStatusChanged", "test.device_audit")
    device = DeviceFactory()

    assert device_status_change(device_id=device.pk, status="maintenance", actor="ops")
    inbox = wait_for(
        lambda: EventInbox.objects.filter(handler="test.device_audit").first(), "first delivery"
    )
    message = audit.seen[0].to_message()
    send = transport_current()
    send(message)
    send(message)
    send({**message, "event_id": "republished-1"})  # the producer sent the fact again
    sentinel("ping:after-duplicates")

    assert audit.calls == 1
    assert effects("test.device_audit", inbox.idempotency_key) == 1
    assert inbox.idempotency_key.startswith(f"device-status:{device.pk}:active:maintenance:")


def test_a_failing_handler_is_retried_dead_lettered_once_and_replayed_once_fixed(
    ping, make_handler, sentinel, worker, caplog
) -> None:
    failing = make_handler(ping, "test.failing")
    failing.broken = True
    caplog.set_level(logging.WARNING)

    event_publish(ping, idempotency_key="ping:broker-dead", payload={"farm": "f", "level": 1})
    dead = wait_for(lambda: EventDeadLetter.objects.first(), "the dead letter")
    sentinel("ping:after-dead-letter")

    assert failing.calls == 5
    assert EventDeadLetter.objects.count() == 1
    assert (dead.handler, dead.reason, dead.attempts) == ("test.failing", "retries_exhausted", 5)
    assert len(dead_letter_lines(caplog, "ping:broker-dead")) == 1

    failing.broken = False
    call_command("dlq", "replay", str(dead.pk), "--by", "ops", stdout=io.StringIO())
    wait_for(lambda: effects("test.failing", "ping:broker-dead"), "the replayed event")
    sentinel("ping:after-replay")

    assert failing.calls == 6
    assert effects("test.failing", "ping:broker-dead") == 1
