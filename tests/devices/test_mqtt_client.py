"""The MQTT plumbing on a real broker (embedded amqtt by default, Mosquitto with MQTT_URL):
a publish that returned was acknowledged and arrives, concurrent publishers lose and
duplicate nothing, an unreachable broker fails fast, and a persistent session keeps what
was published while its subscriber was away."""

from __future__ import annotations

import contextlib
import logging
import queue
import socket
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import paho.mqtt.client as paho
import pytest

from config.env import MqttConfig
from devices.mqtt.client import MqttUnavailable, connect, new_client
from devices.mqtt.publisher import (
    BrokerUnreachable,
    PubackTimeout,
    Publisher,
    PublishError,
    get_publisher,
)
from devtools.embedded_broker import EmbeddedBroker
from tests.mqtt_fixtures import LOOPBACK, MqttClientFactory, PrivateMosquitto, free_port
from tests.waiting import wait_for

RECEIVE_TIMEOUT_S = 5.0
RECONNECT_TIMEOUT_S = 5.0  # paho retries after 1 s, then 2 s, ...
# Long enough for paho's reconnect delay to have grown past its first steps (1 s, 2 s).
LONG_OUTAGE_S = 4.0
RECONNECTED_WITHIN_S = 2.2  # a retry at most every 2 s, plus the connect itself


def unique_topic(name: str) -> str:
    """Tests may share a broker with other runs: never listen on someone else's topic."""
    return f"test/{uuid.uuid4().hex[:12]}/{name}"


class Inbox:
    """Collects received payloads; waits on a queue instead of sleeping."""

    def __init__(self) -> None:
        self.messages: queue.Queue[tuple[str, bytes]] = queue.Queue()

    def __call__(self, client: paho.Client, userdata: Any, message: paho.MQTTMessage) -> None:
        self.messages.put((message.topic, bytes(message.payload)))

    def take(self, count: int) -> list[tuple[str, bytes]]:
        return [self.messages.get(timeout=RECEIVE_TIMEOUT_S) for _ in range(count)]

    def take_until(self, last_payload: bytes) -> list[bytes]:
        payloads: list[bytes] = []
        while True:
            _, payload = self.messages.get(timeout=RECEIVE_TIMEOUT_S)
            if payload == last_payload:
                return payloads
            payloads.append(payload)


@pytest.fixture
def publisher(mqtt_config: MqttConfig) -> Iterator[Publisher]:
    publisher = Publisher(config=mqtt_config)
    publisher.start()
    yield publisher
    publisher.close()


def test_publish_returns_message_id_after_puback_and_subscriber_receives_it(
    publisher: Publisher, mqtt_client_factory: MqttClientFactory
) -> None:
    topic, inbox = unique_topic("rpc/request"), Inbox()
    mqtt_client_factory(subscribe=[topic], on_message=inbox)

    mid = publisher.publish(topic, b'{"commandId": "c-1"}')

    assert isinstance(mid, int) and mid > 0
    assert inbox.take(1) == [(topic, b'{"commandId": "c-1"}')]


def test_publish_from_eight_threads_delivers_every_message_once(
    publisher: Publisher, mqtt_client_factory: MqttClientFactory
) -> None:
    topic, inbox = unique_topic("telemetry"), Inbox()
    mqtt_client_factory(subscribe=[topic], on_message=inbox)
    threads_n, per_thread = 8, 40
    expected = {f"{t}-{n}".encode() for t in range(threads_n) for n in range(per_thread)}
    errors: list[BaseException] = []

    def publish_many(t: int) -> None:
        try:
            for n in range(per_thread):
                publisher.publish(topic, f"{t}-{n}")
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=publish_many, args=(t,)) for t in range(threads_n)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    # One connection, one topic: the broker delivers in order, so once this marker arrives
    # every earlier message (and any duplicate of it) has arrived too.
    publisher.publish(topic, b"end")

    received = inbox.take_until(b"end")
    assert errors == []
    assert set(received) == expected
    assert [p for p, seen in Counter(received).items() if seen > 1] == []


def test_get_publisher_is_one_started_instance_per_process(mqtt_config: MqttConfig) -> None:
    first = get_publisher()

    assert get_publisher() is first
    assert first.is_connected()
    first.publish(unique_topic("state"), b"{}")


def test_publish_raises_when_broker_is_unreachable(mqtt_config: MqttConfig) -> None:
    closed = replace(mqtt_config, host=LOOPBACK, port=free_port())
    publisher = Publisher(config=closed)
    publisher.start(timeout_s=0.2)
    try:
        with pytest.raises(PublishError, match="not connected"):
            publisher.publish(unique_topic("rpc/request"), b"{}", timeout_s=0.2)
    finally:
        publisher.close()


class FakeBroker:
    """A socket that answers CONNECT with a fixed MQTT 3.1.1 CONNACK and then acknowledges
    nothing: a broker that refuses us, one that stalls without closing the socket, or (with
    ``drop_on_publish``) one whose connection breaks as a PUBLISH arrives."""

    def __init__(self, connack_code: int, drop_on_publish: bool = False) -> None:
        self.listener = socket.create_server((LOOPBACK, 0))
        self.port: int = self.listener.getsockname()[1]
        self.connack = bytes([0x20, 0x02, 0x00, connack_code])
        self.drop_on_publish = drop_on_publish
        self.accepted: list[socket.socket] = []
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        with contextlib.suppress(OSError):
            while True:
                conn, _ = self.listener.accept()
                self.accepted.append(conn)
                conn.recv(1024)  # CONNECT
                conn.sendall(self.connack)
                threading.Thread(target=self._drain, args=(conn,), daemon=True).start()

    def _drain(self, conn: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while data := conn.recv(1024):
                if self.drop_on_publish and data[0] >> 4 == 3:  # packet type 3: PUBLISH
                    conn.close()
                    return

    def config(self, base: MqttConfig) -> MqttConfig:
        return replace(
            base, host=LOOPBACK, port=self.port, protocol=4, tls=False, username=None, password=None
        )

    def close(self) -> None:
        for conn in self.accepted:
            conn.close()
        self.listener.close()


@pytest.fixture
def silent_broker() -> Iterator[FakeBroker]:
    broker = FakeBroker(connack_code=0)  # accepted
    yield broker
    broker.close()


@pytest.fixture
def refusing_broker() -> Iterator[FakeBroker]:
    broker = FakeBroker(connack_code=5)  # not authorized
    yield broker
    broker.close()


@pytest.fixture
def dropping_broker() -> Iterator[FakeBroker]:
    broker = FakeBroker(connack_code=0, drop_on_publish=True)
    yield broker
    broker.close()


def test_publish_raises_when_puback_does_not_arrive_in_time(
    mqtt_config: MqttConfig, silent_broker: FakeBroker
) -> None:
    publisher = Publisher(config=silent_broker.config(mqtt_config))
    publisher.start(timeout_s=2)
    try:
        with pytest.raises(PubackTimeout, match="no PUBACK"):
            publisher.publish(unique_topic("rpc/request"), b"{}", timeout_s=0.3)
    finally:
        publisher.close()


def test_a_connection_lost_before_the_puback_fails_the_publish_at_once_as_unreachable(
    mqtt_config: MqttConfig, dropping_broker: FakeBroker
) -> None:
    publisher = Publisher(config=dropping_broker.config(mqtt_config))
    publisher.start(timeout_s=2)
    started = time.monotonic()
    try:
        with pytest.raises(BrokerUnreachable, match="connection lost"):
            publisher.publish(unique_topic("rpc/request"), b"{}", timeout_s=5)
    finally:
        publisher.close()
    assert time.monotonic() - started < 2  # not the whole PUBACK timeout


def test_connect_gives_up_after_the_allowed_attempts_and_logs_each(
    mqtt_config: MqttConfig, caplog: pytest.LogCaptureFixture
) -> None:
    closed = replace(mqtt_config, host=LOOPBACK, port=free_port())
    client = new_client(f"test-{uuid.uuid4().hex[:12]}", config=closed)

    with (
        caplog.at_level(logging.WARNING, logger="devices.mqtt"),
        pytest.raises(MqttUnavailable, match="unavailable after 3 attempts"),
    ):
        connect(client, attempts=3, max_backoff_s=0.05)

    failures = [r for r in caplog.records if "failed (attempt" in r.getMessage()]
    assert len(failures) == 3


def test_connect_fails_at_once_when_the_broker_refuses_the_credentials(
    mqtt_config: MqttConfig, refusing_broker: FakeBroker
) -> None:
    config = refusing_broker.config(mqtt_config)
    client = new_client(f"test-{uuid.uuid4().hex[:12]}", config=config)

    with pytest.raises(MqttUnavailable, match="refused"):
        connect(client, config=config, attempts=None)  # retrying forever would not help


def test_persistent_session_receives_what_was_published_while_away(
    mqtt_config: MqttConfig, publisher: Publisher, mqtt_client_factory: MqttClientFactory
) -> None:
    if mqtt_config.embedded:
        pytest.skip(
            "amqtt drops queued QoS 1 messages of a persistent session (docs/spec.md §11); "
            "run with MQTT_URL=mqtt://127.0.0.1:1883 (Mosquitto)"
        )
    topic, client_id = unique_topic("rpc/response"), f"test-bridge-{uuid.uuid4().hex[:12]}"
    away = mqtt_client_factory(client_id, subscribe=[topic], clean_start=False, session_expiry_s=30)
    away.disconnect()
    away.loop_stop()

    for n in range(3):
        publisher.publish(topic, f"while-away-{n}")
    inbox = Inbox()
    back = mqtt_client_factory(client_id, on_message=inbox, clean_start=False, session_expiry_s=30)

    assert sorted(payload for _, payload in inbox.take(3)) == [
        b"while-away-0",
        b"while-away-1",
        b"while-away-2",
    ]
    # Leave no session behind on a shared broker: a clean start with no expiry discards it.
    back.disconnect()
    back.loop_stop()
    mqtt_client_factory(client_id).disconnect()


def test_publisher_reconnects_after_a_broker_restart(mqtt_config: MqttConfig) -> None:
    broker = EmbeddedBroker(free_port())
    broker.start()
    config = replace(
        mqtt_config,
        host=broker.host,
        port=broker.port,
        protocol=4,
        tls=False,
        username=None,
        password=None,
        embedded=True,
    )
    publisher = Publisher(config=config)
    publisher.start()
    try:
        publisher.publish(unique_topic("telemetry"), b"before")
        broker.stop()
        with pytest.raises(PublishError):
            publisher.publish(unique_topic("telemetry"), b"down", timeout_s=0.2)
        broker.start()

        assert publisher.wait_connected(RECONNECT_TIMEOUT_S)
        assert publisher.publish(unique_topic("telemetry"), b"after") > 0
    finally:
        publisher.close()
        broker.stop()


def test_publisher_is_back_within_its_max_backoff_after_a_long_broker_outage(
    mqtt_config: MqttConfig, private_mosquitto: PrivateMosquitto
) -> None:
    """paho doubles its reconnect delay while the broker is away; capped small, the publisher
    does not sit out a long backoff once the broker is back (dispatch waits on it)."""
    publisher = Publisher(config=private_mosquitto.config(mqtt_config))
    publisher.start()
    try:
        publisher.publish(unique_topic("rpc/request"), b"before")
        private_mosquitto.stop()
        wait_for(lambda: not publisher.is_connected(), "the publisher to notice", 5)
        time.sleep(LONG_OUTAGE_S)  # real time on purpose: paho's own backoff grows meanwhile
        private_mosquitto.start()
        back = time.monotonic()

        assert publisher.wait_connected(RECONNECTED_WITHIN_S), (
            f"not reconnected {RECONNECTED_WITHIN_S}s after the broker came back"
        )
        assert time.monotonic() - back <= RECONNECTED_WITHIN_S
        assert publisher.publish(unique_topic("rpc/request"), b"after") > 0
    finally:
        publisher.close()
