"""Batches form from what is waiting: while a stage's queue still holds hand-offs no worker
has taken, the bridge keeps new messages for one larger batch (up to BRIDGE_HOLD_MAX_MS);
with an idle queue, or when the queue cannot be looked at, it hands off at once."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

import paho.mqtt.client as paho
import pytest
from kombu import Exchange, Queue

from config.celery import app as celery_app
from devices.mqtt.bridge import MqttBridge
from devices.mqtt.bridge.batcher import queue_length
from devices.mqtt.messages import DEVICE_MESSAGES_TASK
from tests.devices.test_bridge import Recorder, publish_all, telemetry
from tests.waiting import wait_for


class Backlog:
    """A queue that holds three untaken hand-offs while ``busy`` is set."""

    def __init__(self, busy: bool = True) -> None:
        self.busy = threading.Event()
        if busy:
            self.busy.set()

    def __call__(self, task_name: str) -> int:
        return 3 if self.busy.is_set() else 0


@pytest.fixture
def bridge_with(make_bridge: Callable[..., MqttBridge], settings: Any) -> Callable[..., MqttBridge]:
    """A bridge that flushes on a short timer and never on size, holding up to ``hold_ms``."""

    def make(hold_ms: float, **kwargs: Any) -> MqttBridge:
        settings.BRIDGE_HOLD_MAX_MS = hold_ms
        return make_bridge(flush_ms=5, batch_size=1000, inflight_window=1000, **kwargs)

    return make


def test_while_the_queue_is_busy_messages_wait_for_one_larger_batch(
    bridge_with: Callable[..., MqttBridge], device: paho.Client, prefix: str
) -> None:
    recorder, backlog = Recorder(), Backlog()
    bridge = bridge_with(60_000, handoff=recorder, backlog=backlog)
    publish_all(device, [telemetry(f"{prefix}-{n}", n) for n in range(8)])
    wait_for(lambda: bridge.stats.received["telemetry"] >= 8, "eight received")
    time.sleep(0.1)  # twenty flush timers
    assert recorder.args(prefix) == [] and bridge.stats.holds > 0

    backlog.busy.clear()

    wait_for(lambda: len(recorder.args(prefix)) == 8, "the held messages handed off")
    assert len(recorder.batches_with(prefix)) == 1
    wait_for(lambda: bridge.stats.acked >= 8, "acknowledged after the hand-off")


def test_a_hold_ends_after_its_longest_wait_however_busy_the_queue(
    bridge_with: Callable[..., MqttBridge], device: paho.Client, prefix: str
) -> None:
    recorder = Recorder()
    bridge_with(300, handoff=recorder, backlog=Backlog())
    started = time.monotonic()
    publish_all(device, [telemetry(f"{prefix}-1", 1)])
    wait_for(lambda: recorder.args(prefix), "handed off once the hold ran out")
    assert time.monotonic() - started >= 0.3


@pytest.mark.parametrize("backlog", [Backlog(busy=False), "broken"])
def test_an_idle_or_unreadable_queue_holds_nothing(
    bridge_with: Callable[..., MqttBridge], device: paho.Client, prefix: str, backlog: Any
) -> None:
    def unreadable(task_name: str) -> int:
        raise ConnectionError("broker away")

    recorder = Recorder()
    bridge = bridge_with(60_000, handoff=recorder,
                         backlog=unreadable if backlog == "broken" else backlog)  # fmt: skip
    publish_all(device, [telemetry(f"{prefix}-1", 1)])
    wait_for(lambda: recorder.args(prefix), "handed off without waiting", timeout_s=5)
    assert bridge.stats.holds == 0


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


RESPONSE = b'{"commandId":"cmd_1","status":"accepted","resultCode":"ok","message":null}'
STATE = b'{"commandId":"cmd_1","reportedState":{"io1":true},"appliedAt":"2026-01-01T00:00:00Z"}'


def test_an_ack_waits_for_its_state_report_and_both_cross_in_one_batch(
    make_bridge: Callable[..., MqttBridge],
    device: paho.Client,
    prefix: str,
    settings: Any,
) -> None:
    settings.BRIDGE_REPLY_WAIT_MS = 60_000  # only the state report ends the wait
    recorder = Recorder()
    make_bridge(handoff=recorder, flush_ms=1)
    publish_all(device, [(f"devices/{prefix}-A/rpc/response", RESPONSE)])
    publish_all(device, [telemetry(f"{prefix}-T", 1)])  # gives the bridge's loop a few turns
    publish_all(device, [(f"devices/{prefix}-A/state", STATE)])

    wait_for(lambda: len(recorder.args(prefix, DEVICE_MESSAGES_TASK)) == 2, "ack and state")
    replies = [b for name, b in recorder.batches if name == DEVICE_MESSAGES_TASK]
    assert [[a[1] for a in b] for b in replies if b[0][0].startswith(prefix)] == [
        ["rpc_response", "state"]
    ]


def test_an_ack_without_a_state_report_waits_no_longer_than_the_reply_wait(
    make_bridge: Callable[..., MqttBridge],
    device: paho.Client,
    prefix: str,
    settings: Any,
) -> None:
    settings.BRIDGE_REPLY_WAIT_MS = 300
    recorder = Recorder()
    make_bridge(handoff=recorder, flush_ms=1)
    started = time.monotonic()
    publish_all(device, [(f"devices/{prefix}-A/rpc/response", RESPONSE)])
    wait_for(lambda: recorder.args(prefix, DEVICE_MESSAGES_TASK), "the ack handed off alone")
    assert time.monotonic() - started >= 0.3
