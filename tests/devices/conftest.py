"""Bridge fixtures shared by the bridge's test modules: a started bridge on the test broker
(stopped and its session forgotten at teardown), a device-side client and a serial prefix
of the test's own (the broker may be shared with other runs)."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from typing import Any

import paho.mqtt.client as paho
import pytest

from config.env import MqttConfig
from devices.mqtt.bridge import MqttBridge
from devices.mqtt.client import forget_session
from tests.mqtt_fixtures import MqttClientFactory
from tests.waiting import WAIT_S

SESSION_EXPIRY_S = 60


@pytest.fixture
def prefix() -> str:
    return f"TB{uuid.uuid4().hex[:8]}"


@pytest.fixture
def make_bridge(mqtt_config: MqttConfig) -> Iterator[Callable[..., MqttBridge]]:
    """Started bridges with short-lived sessions, stopped and forgotten at teardown."""
    started: list[MqttBridge] = []

    def make(client_id: str | None = None, **kwargs: Any) -> MqttBridge:
        kwargs.setdefault("config", mqtt_config)
        kwargs.setdefault("session_expiry_s", SESSION_EXPIRY_S)
        bridge = MqttBridge(client_id=client_id or f"test-bridge-{uuid.uuid4().hex[:10]}", **kwargs)
        bridge.start()
        started.append(bridge)
        assert bridge.wait_connected(WAIT_S), "bridge did not connect and subscribe"
        return bridge

    yield make
    for bridge in started:
        bridge.stop()
    for client_id in {bridge.client_id for bridge in started}:
        forget_session(mqtt_config, client_id)


@pytest.fixture
def device(mqtt_client_factory: MqttClientFactory) -> paho.Client:
    """A device-side client; publishes QoS 1 without waiting for each PUBACK."""
    return mqtt_client_factory()
