"""The broker configuration a deployment runs (deploy/mosquitto.conf, its dynamic security
plugin for the devices and deploy/mosquitto-acl-backend for the backend), on a private
Mosquitto (tests/devices/deployed_broker.py): only listener ports, file paths and the
persistence directory are adapted, and the devices' logins are set through the product's
dynamic security backend. What it guarantees, checked with paho: nobody logs in
anonymously; a device publishes and receives only under its own serial; a device can take
neither the bridge's client id nor another device's (so it cannot disconnect either); the
plugin's admin opens nothing on the backend's listener and is no device; the backend
subscribes to every device through the bridge's shared subscription and publishes RPC
requests."""

from __future__ import annotations

import queue
import secrets
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import paho.mqtt.client as paho
import pytest

from config.env import MqttConfig
from config.task_names import DEVICE_MESSAGES_RECONCILE, TELEMETRY_INGEST
from devices.mqtt.bridge import MqttBridge
from devices.mqtt.client import (
    backend_client_id,
    start_client,
)
from devices.mqtt.publisher import Publisher
from tests.devices.deployed_broker import (
    BACKEND_USER,
    DYNSEC_ADMIN,
    DeployedMosquitto,
    Login,
    missing_tools,
    publish,
    refused,
)
from tests.waiting import WAIT_S


@dataclass
class Broker:
    server: DeployedMosquitto
    a: Login
    b: Login
    backend: Login

    def config(self, login: Login | None, *, port: int | None = None) -> MqttConfig:
        """How ``login`` connects: the backend to its listener, a device to the devices'."""
        return self.server.config(login, port=port)


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[Broker]:
    reason = missing_tools()
    if reason:
        pytest.skip(reason)
    tag = uuid.uuid4().hex[:6]
    a, b = (Login(f"SEC-{n}-{tag}", secrets.token_urlsafe(12)) for n in "AB")
    backend = Login(BACKEND_USER, secrets.token_urlsafe(12))
    server = DeployedMosquitto(tmp_path, backend, Login(DYNSEC_ADMIN, secrets.token_urlsafe(12)))
    server.start()
    try:
        credentials = server.credentials()
        for device_login in (a, b):
            credentials.set_login(device_login.username, device_login.password)
        yield Broker(server, a, b, backend)
    finally:
        server.stop()


class Inbox:
    """What a client received; waits on a queue, never sleeps."""

    def __init__(self) -> None:
        self.messages: queue.Queue[tuple[str, bytes]] = queue.Queue()

    def __call__(self, client: paho.Client, userdata: Any, message: paho.MQTTMessage) -> None:
        self.messages.put((message.topic, bytes(message.payload)))

    def until(self, sentinel: bytes) -> list[tuple[str, bytes]]:
        """Every (topic, payload) received up to and including the sentinel's message. Mosquitto
        routes each publish before it acknowledges it, so a message published (and acknowledged)
        before the sentinel, by any client, arrives before it or never."""
        received: list[tuple[str, bytes]] = []
        while not received or received[-1][1] != sentinel:
            received.append(self.messages.get(timeout=WAIT_S))
        return received


class Handoffs:
    """The bridge's hand-off, keeping (task name, serial, kind) per message."""

    def __init__(self) -> None:
        self.messages: queue.Queue[tuple[str, str, str]] = queue.Queue()

    def __call__(self, task_name: str, batch: list[list[Any]]) -> None:
        for arg in batch:
            kind = str(arg[1]) if task_name == DEVICE_MESSAGES_RECONCILE else "telemetry"
            self.messages.put((task_name, str(arg[0]), kind))

    def take(self, count: int) -> set[tuple[str, str, str]]:
        return {self.messages.get(timeout=WAIT_S) for _ in range(count)}


@pytest.fixture
def clients() -> Iterator[list[paho.Client]]:
    started: list[paho.Client] = []
    yield started
    for client in started:
        client.disconnect()
        client.loop_stop()


@pytest.fixture
def bridge(broker: Broker) -> Iterator[tuple[MqttBridge, Handoffs]]:
    """A bridge as deployed: the backend's user, a client id of the backend's scheme, a
    persistent session and the shared subscriptions."""
    handoffs = Handoffs()
    bridge = MqttBridge(
        config=broker.config(broker.backend),
        client_id=backend_client_id("bridge", uuid.uuid4().hex[:8]),
        handoff=handoffs,
        session_expiry_s=60,
    )
    bridge.start()
    assert bridge.wait_connected(WAIT_S), "the bridge did not connect and subscribe"
    yield bridge, handoffs
    bridge.stop()


@pytest.fixture
def backend(broker: Broker) -> Iterator[Publisher]:
    """The dispatcher's publisher as deployed: the backend's user, a per-process client id."""
    publisher = Publisher(config=broker.config(broker.backend))
    publisher.start()
    assert publisher.wait_connected(WAIT_S)
    yield publisher
    publisher.close()


def device(
    broker: Broker,
    clients: list[paho.Client],
    login: Login,
    client_id: str | None = None,
    **options: Any,
) -> paho.Client:
    client = start_client(client_id or login.username, config=broker.config(login), **options)
    clients.append(client)
    return client  # fmt: skip


def test_anonymous_and_wrong_credentials_are_refused_on_every_listener(broker: Broker) -> None:
    wrong = Login(broker.a.username, "not-the-password")
    for port in broker.server.ports.values():
        assert refused(broker.config(None, port=port)), f"anonymous accepted on {port}"
        assert refused(broker.config(wrong, port=port)), f"wrong password accepted on {port}"


def test_device_credentials_open_only_the_device_listener_and_the_backends_only_its_own(
    broker: Broker,
) -> None:
    assert refused(broker.config(broker.a, port=broker.server.backend_port))
    assert refused(broker.config(broker.backend, port=broker.server.device_port))
    assert refused(broker.config(broker.server.admin, port=broker.server.backend_port))
    assert not refused(broker.config(broker.a))
    assert not refused(broker.config(broker.backend))


def test_a_device_publishes_only_under_its_own_serial(
    broker: Broker,
    bridge: tuple[MqttBridge, Handoffs],
    backend: Publisher,
    clients: list[paho.Client],
) -> None:
    _, handoffs = bridge
    a, b = broker.a.username, broker.b.username
    inbox_b = Inbox()
    device(broker, clients, broker.b, subscribe=[f"devices/{b}/rpc/request"], on_message=inbox_b)
    device_a = device(broker, clients, broker.a)

    for kind in ("telemetry", "rpc/response", "state", "rpc/request"):
        publish(device_a, f"devices/{b}/{kind}", b"forged")
    publish(device_a, f"devices/{a}/rpc/request", b"forged")  # requests are the backend's
    for kind in ("telemetry", "rpc/response", "state"):
        publish(device_a, f"devices/{a}/{kind}", b"{}")
    sentinel = f"devices/{b}/rpc/request", b"sentinel"
    backend.publish(*sentinel)

    # B's messages would have been handed off before A's own (same publisher, in order).
    assert handoffs.take(3) == {
        (TELEMETRY_INGEST, a, "telemetry"),
        (DEVICE_MESSAGES_RECONCILE, a, "rpc_response"),
        (DEVICE_MESSAGES_RECONCILE, a, "state"),
    }
    assert handoffs.messages.empty()
    assert inbox_b.until(b"sentinel") == [sentinel]  # no request forged by A reached B


def test_a_device_receives_only_its_own_rpc_requests(
    broker: Broker, backend: Publisher, clients: list[paho.Client]
) -> None:
    a, b = broker.a.username, broker.b.username
    inbox_a, inbox_b = Inbox(), Inbox()
    wide = [f"devices/{b}/rpc/request", "devices/+/rpc/request", "devices/#", "#", "$SYS/#"]
    device(
        broker, clients, broker.a, subscribe=[*wide, f"devices/{a}/rpc/request"], on_message=inbox_a
    )
    device(broker, clients, broker.b, subscribe=[f"devices/{b}/rpc/request"], on_message=inbox_b)

    backend.publish(f"devices/{b}/rpc/request", b"for-b")
    backend.publish(f"devices/{a}/rpc/request", b"for-a")

    assert {topic for topic, _ in inbox_a.until(b"for-a")} == {f"devices/{a}/rpc/request"}
    assert inbox_b.until(b"for-b") == [(f"devices/{b}/rpc/request", b"for-b")]


def test_a_device_can_take_neither_the_bridges_client_id_nor_another_devices(
    broker: Broker, bridge: tuple[MqttBridge, Handoffs], clients: list[paho.Client]
) -> None:
    bridge_, handoffs = bridge
    b = broker.b.username
    device_b = device(broker, clients, broker.b)
    kicked: list[Any] = []
    device_b.on_disconnect = lambda *args: kicked.append(args)

    # With the bridge's client id, then with B's: each time the broker makes it A's own.
    rogue = device(broker, clients, broker.a, bridge_.client_id)
    rogue.disconnect()
    device(broker, clients, broker.a, b)
    publish(device_b, f"devices/{b}/telemetry", b"{}")

    assert handoffs.take(1) == {(TELEMETRY_INGEST, b, "telemetry")}
    assert bridge_.wait_connected(0) and bridge_.stats.reconnects == 0
    assert kicked == [] and device_b.is_connected()


def test_the_backend_receives_every_devices_messages_and_sends_each_its_requests(
    broker: Broker,
    bridge: tuple[MqttBridge, Handoffs],
    backend: Publisher,
    clients: list[paho.Client],
) -> None:
    _, handoffs = bridge
    logins = (broker.a, broker.b)
    inboxes = {login.username: Inbox() for login in logins}
    for login in logins:
        serial = login.username
        client = device(
            broker,
            clients,
            login,
            subscribe=[f"devices/{serial}/rpc/request"],
            on_message=inboxes[serial],
        )
        for kind in ("telemetry", "rpc/response", "state"):
            publish(client, f"devices/{serial}/{kind}", b"{}")

    for serial in inboxes:
        backend.publish(f"devices/{serial}/rpc/request", serial.encode())

    assert handoffs.take(6) == {
        (task, serial, kind)
        for serial in inboxes
        for task, kind in (
            (TELEMETRY_INGEST, "telemetry"),
            (DEVICE_MESSAGES_RECONCILE, "rpc_response"),
            (DEVICE_MESSAGES_RECONCILE, "state"),
        )
    }
    for serial, inbox in inboxes.items():
        assert inbox.until(serial.encode()) == [(f"devices/{serial}/rpc/request", serial.encode())]
