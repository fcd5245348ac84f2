"""Retiring a bridge's client id (an old one, or a bridge gone for good) on a private
Mosquitto: what its session queued while it was away is handed off, then the session ends,
so the id takes no more share of the shared subscription and every later message reaches the
bridges that run."""

from __future__ import annotations

import io
import threading
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from django.core.management import call_command
from django.test import override_settings

from config.env import MqttConfig
from devices.mqtt.bridge import MqttBridge
from devices.mqtt.client import connect, new_client
from devices.mqtt.publisher import Publisher
from tests.mqtt_fixtures import LOOPBACK, PrivateMosquitto
from tests.waiting import WAIT_S, wait_for

OLD_ID = "farm-bridge-oldhost"  # the id scheme before backend ids held a "/"


class Recorder:
    def __init__(self) -> None:
        self.payloads: list[str] = []
        self._lock = threading.Lock()

    def __call__(self, task_name: str, batch: list[list[Any]]) -> None:
        with self._lock:
            self.payloads.extend(str(arg[1]) for arg in batch)

    def count(self) -> int:
        with self._lock:
            return len(self.payloads)


@pytest.fixture
def config(private_mosquitto: PrivateMosquitto) -> MqttConfig:
    group = f"test-{uuid.uuid4().hex[:8]}"
    return MqttConfig(LOOPBACK, private_mosquitto.port, None, None, False, False, 5, group)


@pytest.fixture
def running(config: MqttConfig) -> Iterator[tuple[MqttBridge, Recorder]]:
    """The old id's session left in the group, then a bridge of the new scheme running."""
    old = MqttBridge(config=config, client_id=OLD_ID, handoff=Recorder(), session_expiry_s=600)
    old.start()
    assert old.wait_connected(WAIT_S)
    old.stop()  # its session stays, subscribed: it takes its share while nobody is there
    recorder = Recorder()
    new = MqttBridge(
        config=config, client_id="farm-bridge/newhost", handoff=recorder, session_expiry_s=600
    )
    new.start()
    assert new.wait_connected(WAIT_S)
    yield new, recorder
    new.stop()


def publish(config: MqttConfig, tag: str, count: int) -> set[str]:
    payloads = {f'{{"values":{{"n":{n}}},"tag":"{tag}"}}' for n in range(count)}
    publisher = Publisher(config=config)
    publisher.start()
    try:
        for payload in payloads:
            publisher.publish("devices/RET-1/telemetry", payload)
    finally:
        publisher.close()
    return payloads


def session_present(config: MqttConfig, client_id: str) -> bool:
    """Whether the broker still holds a session for ``client_id`` (then forgets it)."""
    present: list[bool] = []
    client = new_client(client_id, config=config, clean_start=False, session_expiry_s=0)
    client.on_connect = lambda c, u, flags, *_: present.append(bool(flags.session_present))
    connect(client, config=config, attempts=3)
    client.disconnect()
    return present[0]


def test_a_retired_id_hands_off_what_its_session_held_and_takes_no_more_share(
    config: MqttConfig, running: tuple[MqttBridge, Recorder]
) -> None:
    _, recorder = running
    first = publish(config, "first", 40)  # split between the running bridge and the old session
    wait_for(lambda: recorder.count() > 0, "the running bridge's share")
    retiring = Recorder()
    old = MqttBridge(config=config, client_id=OLD_ID, handoff=retiring, retire=True)
    old.start()
    wait_for(lambda: recorder.count() + retiring.count() >= 40, "every first message")
    old.stop()

    later = publish(config, "later", 40)

    wait_for(lambda: later <= set(recorder.payloads), "every later message at the running bridge")
    assert retiring.count() > 0, "the old session held nothing: the test would show nothing"
    assert set(recorder.payloads) | set(retiring.payloads) == first | later
    assert not session_present(config, OLD_ID)


def test_the_command_retires_an_old_id_and_stops_by_itself_once_drained(
    config: MqttConfig, running: tuple[MqttBridge, Recorder]
) -> None:
    _, recorder = running
    out = io.StringIO()

    with override_settings(MQTT=config, CELERY_BROKER_EMBEDDED=False):
        call_command("mqtt_bridge", "--retire", "--client-id", OLD_ID, stdout=out)

    later = publish(config, "later", 20)
    wait_for(lambda: later <= set(recorder.payloads), "every later message at the running bridge")
    assert out.getvalue().splitlines()[-1].startswith("stopped:")
    assert not session_present(config, OLD_ID)
