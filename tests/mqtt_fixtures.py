"""MQTT fixtures on a real broker: the embedded amqtt broker on a free port by default, or
the broker named by ``MQTT_URL`` (Mosquitto in CI). Importing this module needs no broker;
only the fixtures connect."""

from __future__ import annotations

import socket
import threading
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace
from typing import Any, Protocol

import paho.mqtt.client as paho
import pytest
from django.test import override_settings

from config.env import MqttConfig
from devices.mqtt.client import close_publisher, connect, new_client
from devices.mqtt.embedded_broker import LOOPBACK, EmbeddedBroker

SUBACK_TIMEOUT_S = 5.0

MessageHandler = Callable[[paho.Client, Any, paho.MQTTMessage], None]


def free_port() -> int:
    """A loopback port nothing listens on right now (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((LOOPBACK, 0))
        port: int = probe.getsockname()[1]
        return port


@pytest.fixture(scope="session")
def mqtt_config() -> Iterator[MqttConfig]:
    """The broker MQTT tests talk to; settings.MQTT points at it for the whole session, so
    code under test (get_publisher, the bridge) connects there too."""
    from django.conf import settings

    configured: MqttConfig = settings.MQTT
    if not configured.embedded:
        # A shared group of our own: persistent sessions left by other runs (or by a
        # production bridge) in the configured group would take a share of our messages.
        config = replace(configured, shared_group=f"test-{uuid.uuid4().hex[:8]}")
        with override_settings(MQTT=config):
            yield config
            close_publisher()
        return
    broker = EmbeddedBroker(free_port())
    broker.start()
    config = replace(configured, host=broker.host, port=broker.port)
    with override_settings(MQTT=config):
        yield config
        close_publisher()
    broker.stop()


class MqttClientFactory(Protocol):
    def __call__(
        self,
        client_id: str | None = None,
        *,
        subscribe: Sequence[str] = (),
        qos: int = 1,
        on_message: MessageHandler | None = None,
        clean_start: bool = True,
        session_expiry_s: int = 0,
        manual_ack: bool = False,
    ) -> paho.Client: ...


@pytest.fixture
def mqtt_client_factory(mqtt_config: MqttConfig) -> Iterator[MqttClientFactory]:
    """Makes connected clients with their network loop running; with ``subscribe`` it
    returns only after the SUBACK, so a message published next is not missed. Every client
    is disconnected at teardown."""
    clients: list[paho.Client] = []

    def make(
        client_id: str | None = None,
        *,
        subscribe: Sequence[str] = (),
        qos: int = 1,
        on_message: MessageHandler | None = None,
        clean_start: bool = True,
        session_expiry_s: int = 0,
        manual_ack: bool = False,
    ) -> paho.Client:
        client = new_client(
            client_id or f"test-{uuid.uuid4().hex[:12]}",
            config=mqtt_config,
            clean_start=clean_start,
            session_expiry_s=session_expiry_s,
            manual_ack=manual_ack,
        )
        subscribed = threading.Event()
        if on_message is not None:
            client.on_message = on_message
        if subscribe:

            def on_connect(c: paho.Client, *_: Any) -> None:
                c.subscribe([(topic, qos) for topic in subscribe])

            client.on_connect = on_connect
            client.on_subscribe = lambda *_: subscribed.set()
        connect(client, config=mqtt_config, attempts=3, max_backoff_s=1.0)
        clients.append(client)
        client.loop_start()
        if subscribe and not subscribed.wait(SUBACK_TIMEOUT_S):
            raise TimeoutError(f"no SUBACK for {list(subscribe)} within {SUBACK_TIMEOUT_S}s")
        return client

    yield make
    for client in clients:
        client.disconnect()
        client.loop_stop()


def forget_session(config: MqttConfig, client_id: str) -> None:
    """Drop a persistent session from the broker (connect with a clean start, disconnect),
    so test bridges leave nothing queued behind them."""
    client = new_client(client_id, config=config, clean_start=True, session_expiry_s=0)
    try:
        connect(client, config=config, attempts=3)
        client.disconnect()
    except Exception:  # the broker may be gone at teardown; nothing to forget then
        pass
