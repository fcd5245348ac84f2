"""MQTT fixtures on a real broker: the embedded amqtt broker on a free port by default, or
the broker named by ``MQTT_URL`` (Mosquitto in CI). Importing this module needs no broker;
only the fixtures connect."""

from __future__ import annotations

import socket
import uuid
from collections.abc import Iterator
from dataclasses import replace
from typing import Any, Protocol

import paho.mqtt.client as paho
import pytest
from django.test import override_settings

from config.env import MqttConfig
from devices.mqtt.client import close_publisher, start_client
from devices.mqtt.embedded_broker import LOOPBACK, EmbeddedBroker


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
    def __call__(self, client_id: str | None = None, **options: Any) -> paho.Client:
        """``options`` as for ``devices.mqtt.client.start_client``."""


@pytest.fixture
def mqtt_client_factory(mqtt_config: MqttConfig) -> Iterator[MqttClientFactory]:
    """Makes connected clients with their network loop running; with ``subscribe`` it
    returns only after the SUBACK, so a message published next is not missed. Every client
    is disconnected at teardown."""
    clients: list[paho.Client] = []

    def make(client_id: str | None = None, **options: Any) -> paho.Client:
        client = start_client(
            client_id or f"test-{uuid.uuid4().hex[:12]}", config=mqtt_config, **options
        )
        clients.append(client)
        return client

    yield make
    for client in clients:
        client.disconnect()
        client.loop_stop()
