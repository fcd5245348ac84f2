"""The MQTT bridge on a real broker (embedded amqtt by default, Mosquitto with MQTT_URL).

What the pipeline relies on: every device message reaches the bridge's store, in batches;
a message is acknowledged only after its batch was committed, so a failed commit or a
stopped bridge loses nothing (the broker redelivers); redelivered telemetry is dropped by the
cache fast path; nothing a device sends can stop the bridge.
"""

from __future__ import annotations

import io
import logging
import threading
import uuid
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import paho.mqtt.client as paho
import pytest
from django.core.management import CommandError, call_command
from django.db import DatabaseError
from django.test import override_settings

from config.env import MqttConfig
from config.task_names import DEVICE_MESSAGES_RECONCILE, TELEMETRY_INGEST
from devices.models import BridgeSlot
from devices.mqtt.bridge import MqttBridge
from devices.mqtt.bridge import batcher as bridge_module
from devices.mqtt.client import forget_session
from devices.mqtt.publisher import Publisher
from devtools.embedded_broker import EmbeddedBroker
from tests.mqtt_fixtures import free_port
from tests.waiting import WAIT_S, wait_for

SESSION_EXPIRY_S = 60


class Recorder:
    """A store that keeps every batch. The broker may be shared with other runs, so
    tests look only at their own serials."""

    def __init__(self) -> None:
        self.batches: list[tuple[str, list[list[Any]]]] = []
        self._lock = threading.Lock()

    def __call__(self, task_name: str, batch: list[list[Any]]) -> None:
        with self._lock:
            self.batches.append((task_name, [list(arg) for arg in batch]))

    def args(self, prefix: str, task_name: str | None = None) -> list[list[Any]]:
        with self._lock:
            return [
                arg
                for name, batch in self.batches
                if task_name in (None, name)
                for arg in batch
                if str(arg[0]).startswith(prefix)
            ]

    def batches_with(self, prefix: str) -> list[list[list[Any]]]:
        with self._lock:
            return [b for _, b in self.batches if any(str(a[0]).startswith(prefix) for a in b)]


def publish_all(client: paho.Client, messages: list[tuple[str, bytes]]) -> None:
    infos = [client.publish(topic, payload, qos=1) for topic, payload in messages]
    for info in infos:
        info.wait_for_publish(WAIT_S)
        assert info.is_published()


def telemetry(serial: str, n: int) -> tuple[str, bytes]:
    return f"devices/{serial}/telemetry", b'{"ts":"2026-01-01T00:00:00Z","values":{"n":%d}}' % n


def test_telemetry_is_handed_off_in_batches_each_message_once(
    make_bridge: Callable[..., MqttBridge], device: paho.Client, prefix: str
) -> None:
    recorder = Recorder()
    bridge = make_bridge(handoff=recorder)
    sent = [telemetry(f"{prefix}-{n % 10}", n) for n in range(200)]

    publish_all(device, sent)

    wait_for(lambda: len(recorder.args(prefix)) >= 200, "200 hand-offs")
    args = recorder.args(prefix, TELEMETRY_INGEST)
    assert sorted(arg[1].encode() for arg in args) == sorted(p for _, p in sent)
    assert {(arg[0], arg[3]) for arg in args} == {(f"{prefix}-{n}", False) for n in range(10)}
    batches = recorder.batches_with(prefix)
    assert len(batches) <= 50 and max(len(b) for b in batches) > 1  # batched, not 1 per task
    wait_for(lambda: bridge.stats.acked >= 200, "200 acknowledgements")
    assert bridge.stats.received["telemetry"] >= 200


def test_responses_and_state_reports_go_to_the_reconcile_task_with_their_kind(
    make_bridge: Callable[..., MqttBridge], device: paho.Client, prefix: str
) -> None:
    recorder = Recorder()
    make_bridge(handoff=recorder)
    response = b'{"commandId":"cmd_1","status":"accepted","resultCode":"ok","message":null}'
    state = b'{"commandId":"cmd_1","reportedState":{"io1":true},"appliedAt":"2026-01-01T00:00:00Z"}'

    publish_all(
        device,
        [
            (f"devices/{prefix}-A/rpc/response", response),
            (f"devices/{prefix}-A/state", state),
            (f"devices/{prefix}-B/state", b"\xff{not utf-8"),  # passed on, flagged
        ],
    )

    args = wait_for(
        lambda: (a := recorder.args(prefix, DEVICE_MESSAGES_RECONCILE)) and len(a) >= 3 and a,
        "three device messages",
    )
    by_serial_kind = {(a[0], a[1]): a for a in args}
    assert by_serial_kind[(f"{prefix}-A", "rpc_response")][2:3] == [response.decode()]
    assert by_serial_kind[(f"{prefix}-A", "state")][2] == state.decode()
    assert by_serial_kind[(f"{prefix}-A", "state")][4] is False
    assert by_serial_kind[(f"{prefix}-B", "state")][2] == "\\xff{not utf-8"
    assert by_serial_kind[(f"{prefix}-B", "state")][4] is True
    assert all("T" in a[3] for a in args)  # received_at as ISO-8601
    assert recorder.args(prefix, TELEMETRY_INGEST) == []


def test_a_failing_commit_is_retried_and_acknowledged_only_after_it_succeeded(
    make_bridge: Callable[..., MqttBridge], device: paho.Client, prefix: str
) -> None:
    acked_during_failures: list[int] = []
    holder: list[MqttBridge] = []
    recorder = Recorder()

    def database_down_twice(group: str, batch: list[list[Any]]) -> None:
        if len(acked_during_failures) < 2:
            acked_during_failures.append(holder[0].stats.acked)
            raise DatabaseError("could not connect to server: Connection refused (test)")
        recorder(group, batch)

    bridge = make_bridge(handoff=database_down_twice, flush_ms=5)
    holder.append(bridge)
    sent = [telemetry(f"{prefix}-1", n) for n in range(20)]

    publish_all(device, sent)

    wait_for(lambda: len(recorder.args(prefix)) >= 20, "all twenty committed")
    assert sorted(arg[1].encode() for arg in recorder.args(prefix)) == sorted(p for _, p in sent)
    assert acked_during_failures == [0, 0]
    wait_for(lambda: bridge.stats.acked >= 20, "acknowledgements after the commit")
    assert bridge.stats.store_failures == 2
    assert bridge.stats.stored >= 20


def test_telemetry_seen_within_the_ttl_is_dropped_after_it_was_handed_off(
    make_bridge: Callable[..., MqttBridge], device: paho.Client, prefix: str
) -> None:
    recorder = Recorder()
    bridge = make_bridge(handoff=recorder, dedupe_ttl_s=60)
    original = telemetry(f"{prefix}-1", 1)
    publish_all(device, [original])
    wait_for(lambda: recorder.args(prefix), "the first copy")

    publish_all(device, [original, telemetry(f"{prefix}-1", 2)])  # a redelivery, then news

    wait_for(lambda: len(recorder.args(prefix)) >= 2, "the new reading")
    wait_for(lambda: bridge.stats.duplicates_dropped >= 1, "the duplicate dropped")
    assert sorted(a[1].encode() for a in recorder.args(prefix)) == sorted(
        [original[1], telemetry(f"{prefix}-1", 2)[1]]
    )
    wait_for(lambda: bridge.stats.acked >= 3, "the duplicate acknowledged too")


def test_a_cache_failure_never_loses_telemetry(
    make_bridge: Callable[..., MqttBridge],
    device: paho.Client,
    prefix: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    class BrokenCache:
        def get_many(self, keys: list[str]) -> dict[str, Any]:
            raise ConnectionError("redis down (test)")

        def set_many(self, data: dict[str, Any], timeout: int) -> list[str]:
            raise ConnectionError("redis down (test)")

    monkeypatch.setattr(bridge_module, "cache", BrokenCache())
    recorder = Recorder()
    make_bridge(handoff=recorder)

    publish_all(device, [telemetry(f"{prefix}-1", n) for n in range(5)])

    wait_for(lambda: len(recorder.args(prefix)) >= 5, "five hand-offs despite the cache")


def test_a_message_without_a_serial_is_acknowledged_counted_and_not_handed_off(
    make_bridge: Callable[..., MqttBridge], device: paho.Client, prefix: str
) -> None:
    recorder = Recorder()
    bridge = make_bridge(handoff=recorder)

    publish_all(device, [("devices//telemetry", b'{"values":{}}'), telemetry(f"{prefix}-1", 1)])

    wait_for(lambda: recorder.args(prefix), "the good message after the bad one")
    wait_for(lambda: bridge.stats.unknown_topic >= 1, "the unknown topic counted")
    assert all(arg[0] for _, batch in recorder.batches for arg in batch)
    wait_for(lambda: bridge.stats.acked >= 2, "both acknowledged")


def test_stop_hands_off_and_acknowledges_what_is_waiting_for_the_timer(
    make_bridge: Callable[..., MqttBridge], device: paho.Client, prefix: str
) -> None:
    recorder = Recorder()
    bridge = make_bridge(handoff=recorder, flush_ms=60_000, batch_size=1000, inflight_window=1000)
    publish_all(device, [telemetry(f"{prefix}-1", n) for n in range(5)])
    wait_for(lambda: bridge.stats.received["telemetry"] >= 5, "five received")
    assert recorder.args(prefix) == []

    bridge.stop()

    assert len(recorder.args(prefix)) == 5
    assert bridge.stats.acked >= 5


def needs_persistent_sessions(config: MqttConfig) -> None:
    if config.embedded:
        pytest.skip(
            "amqtt does not deliver QoS 1 messages queued for a persistent session "
            "(docs/spec.md §11); "
            "run with MQTT_URL=mqtt://127.0.0.1:1883 (Mosquitto)"
        )


def test_messages_published_while_the_bridge_is_stopped_reach_the_next_bridge(
    make_bridge: Callable[..., MqttBridge], mqtt_config: MqttConfig, prefix: str
) -> None:
    needs_persistent_sessions(mqtt_config)
    client_id = f"test-bridge-{uuid.uuid4().hex[:10]}"
    make_bridge(client_id, handoff=Recorder()).stop()
    publisher = Publisher(config=mqtt_config)
    publisher.start()
    try:
        for n in range(50):
            publisher.publish(*telemetry(f"{prefix}-1", n))  # returns after the PUBACK
    finally:
        publisher.close()
    recorder = Recorder()

    make_bridge(client_id, handoff=recorder)

    wait_for(lambda: len(recorder.args(prefix)) >= 50, "the 50 queued messages")
    assert sorted(a[1] for a in recorder.args(prefix)) == sorted(
        telemetry(f"{prefix}-1", n)[1].decode() for n in range(50)
    )


def test_messages_whose_commit_never_succeeded_are_redelivered_to_the_next_bridge(
    make_bridge: Callable[..., MqttBridge],
    mqtt_config: MqttConfig,
    device: paho.Client,
    prefix: str,
) -> None:
    needs_persistent_sessions(mqtt_config)
    client_id = f"test-bridge-{uuid.uuid4().hex[:10]}"

    def database_down(group: str, batch: list[list[Any]]) -> None:
        raise DatabaseError("database unreachable (test)")

    failing = make_bridge(client_id, handoff=database_down, flush_ms=5)
    publish_all(device, [telemetry(f"{prefix}-1", n) for n in range(5)])
    wait_for(lambda: failing.stats.store_failures >= 1, "a failed commit")
    wait_for(lambda: failing.stats.received["telemetry"] >= 5, "five received")
    failing.stop()
    assert failing.stats.acked == 0
    recorder = Recorder()

    make_bridge(client_id, handoff=recorder)

    wait_for(lambda: len(recorder.args(prefix)) >= 5, "the five redelivered messages")


def test_the_bridge_reconnects_after_the_broker_restarts_and_logs_each_attempt(
    mqtt_config: MqttConfig, caplog: pytest.LogCaptureFixture, prefix: str
) -> None:
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
        shared_group=None,
    )
    recorder = Recorder()
    bridge = MqttBridge(config=config, client_id=f"test-bridge-{prefix}", handoff=recorder)
    bridge.start()
    try:
        assert bridge.wait_connected(WAIT_S)
        with caplog.at_level(logging.WARNING, logger="devices.mqtt.bridge"):
            broker.stop()
            wait_for(
                lambda: any("connect attempt" in r.getMessage() for r in caplog.records),
                "a logged reconnect attempt",
            )
            broker.start()
            assert bridge.wait_connected(WAIT_S)
        publisher = Publisher(config=config)
        publisher.start()
        try:
            publisher.publish(*telemetry(f"{prefix}-1", 1))
        finally:
            publisher.close()

        wait_for(lambda: recorder.args(prefix), "a message after the restart")
        assert bridge.stats.reconnects >= 1
        assert any("lost its MQTT connection" in r.getMessage() for r in caplog.records)
    finally:
        bridge.stop()
        broker.stop()


def test_the_command_refuses_to_run_on_the_in_process_celery_broker() -> None:
    with (
        override_settings(CELERY_BROKER_EMBEDDED=True),
        pytest.raises(CommandError, match="CELERY_BROKER_URL"),
    ):
        call_command("mqtt_bridge", "--duration", "0.1")


@pytest.mark.django_db(transaction=True)
def test_the_command_runs_prints_progress_and_stops_keeping_its_session(
    mqtt_config: MqttConfig,
) -> None:
    prefix = f"test-bridge-{uuid.uuid4().hex[:10]}"  # its slot 0: test-bridge-…/0
    client_id = f"{prefix}/0"
    out = io.StringIO()
    try:
        with override_settings(
            CELERY_BROKER_EMBEDDED=False,
            BRIDGE_SESSION_EXPIRY_S=60,
            BRIDGE_SLOT_PREFIX=prefix,
            BRIDGE_SLOTS=1,
            BRIDGE_LEASE_S=3.0,
        ):
            call_command(
                "mqtt_bridge",
                "--duration",
                "1.5",
                "--progress-interval",
                "0.2",
                stdout=out,
            )
    finally:
        forget_session(mqtt_config, client_id)

    lines = out.getvalue().splitlines()
    assert lines[0].startswith(f"MQTT bridge slots {prefix}/0..0 (lease 3s) as ")
    assert any(line.startswith("t=") and "slot 0 connected received[" in line for line in lines)
    assert lines[-1] == "stopped: every slot handed over"
    slot = BridgeSlot.objects.get(client_id=client_id)
    assert slot.holder == "" and slot.version == 2  # claimed, then handed over on stop
