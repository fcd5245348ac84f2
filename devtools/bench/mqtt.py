"""Bare paho clients for the bench: the device-side publisher that both ingest paths share,
and the bare subscriber and request/response pair the product is compared with. They are the
floor: a figure of the product reads as a fraction of what paho and this broker do here."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any

import paho.mqtt.client as paho

from config.env import MqttConfig
from devices.mqtt.client import start_client
from devices.mqtt.contract import ContractError, TopicKind, parse_rpc_request, parse_topic
from devtools.bench import BenchError
from devtools.bench.report import Progress

QOS = 1
# QoS 1 messages the publisher keeps in flight: it stands for many devices publishing at
# once, which paho's default of 20 (one device's worth) would throttle on a high-RTT broker.
PUBLISH_WINDOW = 100
RPC_PAD = "x" * 150  # makes a request about an RpcRequest's size (~180 bytes)
POLL_S = 0.02
PACE_S = 0.002
# Messages published but not yet received by the consumer (see publish_paced).
BACKLOG_MAX = 500


def bench_client(role: str, tag: str, config: MqttConfig, **options: Any) -> paho.Client:
    """A connected client named for the run; ``options`` as for ``start_client``."""
    return start_client(f"bench-{role}-{tag}", config=config, **options)


def bench_publisher(tag: str, config: MqttConfig) -> paho.Client:
    """The device side of both ingest paths: one client with PUBLISH_WINDOW in flight."""
    return bench_client("publisher", tag, config, max_inflight=PUBLISH_WINDOW)


def client_close(client: paho.Client) -> None:
    client.disconnect()
    client.loop_stop()


def publish_paced(
    client: paho.Client,
    messages: Sequence[tuple[str, bytes]],
    received: Callable[[], int],
    stall_s: float,
) -> None:
    """Publish at QoS 1 as fast as the consumer takes the messages, never more than
    BACKLOG_MAX ahead of what ``received()`` counts: Mosquitto drops QoS 1 messages beyond a
    client's queue (``max_queued_messages``, 1,000 by default), so an unpaced burst would
    measure the loss, not the path. Raises when the consumer takes nothing for ``stall_s``."""
    progress = Progress("publishing")
    before = received()
    taken, taken_at = 0, time.monotonic()
    for sent, (topic, payload) in enumerate(messages):
        while sent - taken >= BACKLOG_MAX:
            now_taken = received() - before
            if now_taken != taken:
                taken, taken_at = now_taken, time.monotonic()
            elif time.monotonic() - taken_at > stall_s:
                raise BenchError(f"the consumer took nothing for {stall_s:.0f}s at {sent:,} sent")
            else:
                time.sleep(PACE_S)
        info = client.publish(topic, payload, qos=QOS)
        if info.rc != paho.MQTT_ERR_SUCCESS:
            raise BenchError(f"publish to {topic} refused: {paho.error_string(info.rc)}")
        progress.count(sent + 1, len(messages), "messages published")


def bare_subscriber_seconds(
    config: MqttConfig, tag: str, messages: Sequence[tuple[str, bytes]], timeout_s: float
) -> float:
    """First publish → last message received by a bare QoS 1 subscriber, for the same
    payloads on a topic of the run's own (no bridge sees it)."""
    total = len(messages)
    received = [0]
    done = threading.Event()

    def on_message(client: paho.Client, userdata: Any, message: paho.MQTTMessage) -> None:
        received[0] += 1  # paho's network thread only: no lock needed
        if received[0] >= total:
            done.set()

    root = f"bench/{tag}"
    subscriber = bench_client(
        "subscriber", tag, config, subscribe=[f"{root}/#"], on_message=on_message
    )
    publisher = bench_publisher(tag, config)
    progress = Progress("bare paho subscriber")
    ours = [(f"{root}/{topic}", payload) for topic, payload in messages]
    try:
        started = time.perf_counter()
        publish_paced(publisher, ours, lambda: received[0], timeout_s)
        deadline = started + timeout_s
        while not done.wait(POLL_S * 10):
            progress.count(received[0], total, "messages received")
            if time.perf_counter() > deadline:
                raise BenchError(f"bare subscriber: {received[0]:,} of {total:,} in {timeout_s}s")
        seconds = time.perf_counter() - started
        progress.count(total, total, "messages received")
        return seconds
    finally:
        client_close(publisher)
        client_close(subscriber)


def bare_round_trips_ms(
    config: MqttConfig, tag: str, count: int, rate_per_s: float, timeout_s: float
) -> list[float]:
    """Request → response round trips (ms) between two bare clients through the broker, QoS 1
    both ways, offered at ``rate_per_s`` like the command path's telemetry."""
    request_topic, response_topic = f"bench/{tag}/rtt/request", f"bench/{tag}/rtt/response"
    sent: dict[int, float] = {}
    answered: dict[int, float] = {}

    def echo(client: paho.Client, userdata: Any, message: paho.MQTTMessage) -> None:
        client.publish(response_topic, message.payload, qos=QOS)

    def arrived(client: paho.Client, userdata: Any, message: paho.MQTTMessage) -> None:
        answered.setdefault(json.loads(message.payload)["seq"], time.perf_counter())

    responder = bench_client("responder", tag, config, subscribe=[request_topic], on_message=echo)
    requester = bench_client(
        "requester", tag, config, subscribe=[response_topic], on_message=arrived
    )
    progress = Progress("bare paho round trip")
    try:
        started = time.perf_counter()
        for seq in range(count):
            sleep_until(started + seq / rate_per_s)
            payload = json.dumps({"seq": seq, "pad": RPC_PAD})
            sent[seq] = time.perf_counter()
            requester.publish(request_topic, payload, qos=QOS)
            progress.update(f"{seq + 1:,}/{count:,} requests sent")
        deadline = time.perf_counter() + timeout_s
        while len(answered) < count and time.perf_counter() < deadline:
            time.sleep(POLL_S)
        progress.count(count, count, "responses")
        return [(answered[seq] - sent[seq]) * 1000 for seq in sorted(answered)]
    finally:
        client_close(requester)
        client_close(responder)


class RpcObserver:
    """Notes when each RPC request to a device of the run reached the broker's subscribers:
    a plain subscriber next to the simulated devices, so the device side needs no clock."""

    def __init__(self, config: MqttConfig, tag: str, serial_prefix: str) -> None:
        self._prefix = serial_prefix
        self.first_seen: dict[str, datetime] = {}
        self._client = bench_client(
            "observer", tag, config, subscribe=["devices/+/rpc/request"], on_message=self._seen
        )

    def _seen(self, client: paho.Client, userdata: Any, message: paho.MQTTMessage) -> None:
        at = datetime.now(UTC)
        parsed = parse_topic(message.topic)
        if parsed is None or parsed[1] is not TopicKind.RPC_REQUEST:
            return
        if not parsed[0].startswith(self._prefix):
            return
        try:
            command_id = parse_rpc_request(message.payload).command_id
        except ContractError:
            return
        self.first_seen.setdefault(command_id, at)

    def close(self) -> None:
        client_close(self._client)


def sleep_until(at: float) -> None:
    delay = at - time.perf_counter()
    if delay > 0:
        time.sleep(delay)
