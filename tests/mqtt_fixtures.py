"""MQTT fixtures on a real broker: the embedded amqtt broker on a free port by default, or
the broker named by ``MQTT_URL`` (Mosquitto in CI). Importing this module needs no broker;
only the fixtures connect."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
import uuid
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any, Protocol

import paho.mqtt.client as paho
import pytest
from django.test import override_settings

from config.env import MqttConfig
from devices.mqtt.client import start_client
from devices.mqtt.publisher import close_publisher
from devtools.embedded_broker import LOOPBACK, EmbeddedBroker


def free_port() -> int:
    """A loopback port nothing listens on right now (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((LOOPBACK, 0))
        port: int = probe.getsockname()[1]
        return port


def port_open(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.settimeout(0.2)
        return probe.connect_ex((LOOPBACK, port)) == 0


class PrivateMosquitto:
    """A Mosquitto of this test's own on a free port, so the test may stop and start it
    without disturbing anyone else on the machine."""

    START_TIMEOUT_S = 10.0

    def __init__(self, workdir: Path) -> None:
        self.port = free_port()
        self._conf = workdir / "mosquitto.conf"
        self._conf.write_text(
            f"listener {self.port} {LOOPBACK}\nallow_anonymous true\npersistence false\n"
            + ("user root\n" if os.geteuid() == 0 else "")  # else it drops to user mosquitto
        )
        self._log = workdir / "mosquitto.log"
        self._proc: subprocess.Popen[bytes] | None = None

    def config(self, base: MqttConfig) -> MqttConfig:
        return replace(
            base, host=LOOPBACK, port=self.port, protocol=5, tls=False, username=None,
            password=None, embedded=False,
        )  # fmt: skip

    def start(self) -> None:
        with self._log.open("ab") as out:
            self._proc = subprocess.Popen(
                ["mosquitto", "-c", str(self._conf)], stdout=out, stderr=subprocess.STDOUT
            )
        deadline = time.monotonic() + self.START_TIMEOUT_S
        while not port_open(self.port):
            if time.monotonic() > deadline or self._proc.poll() is not None:
                raise RuntimeError(f"private mosquitto did not start: {self._log.read_text()}")
            time.sleep(0.02)

    def stop(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            self._proc.terminate()
            self._proc.wait(10)
        self._proc = None


@pytest.fixture
def private_mosquitto(tmp_path: Path) -> Iterator[PrivateMosquitto]:
    if shutil.which("mosquitto") is None:
        pytest.skip("needs the mosquitto binary (a private broker this test restarts)")
    broker = PrivateMosquitto(tmp_path)
    broker.start()
    yield broker
    broker.stop()


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
