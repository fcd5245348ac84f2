"""The bench reads each stage queue's backlog from the configured Celery broker."""

from __future__ import annotations

import uuid

from kombu import Exchange, Queue

from config.celery import app as celery_app
from devtools.bench.distributed.broker import queue_length
from tests.waiting import wait_for


def test_the_queue_length_is_read_from_the_configured_broker() -> None:
    name = f"test-backlog-{uuid.uuid4().hex[:8]}"
    queue = Queue(name, Exchange(name), routing_key=name)
    assert queue_length(name) == 0  # never declared: nothing waits
    with celery_app.connection_for_write() as conn:
        bound = queue(conn.default_channel)
        bound.declare()
        try:
            with conn.Producer() as producer:
                for n in range(3):
                    producer.publish({"n": n}, exchange=queue.exchange, routing_key=name,
                                     declare=[queue])  # fmt: skip
            wait_for(lambda: queue_length(name) == 3, "three messages counted")
        finally:
            bound.delete()
