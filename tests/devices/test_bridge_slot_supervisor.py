"""Two bridge slot supervisors in one process on the real broker, sharing two slots through
their leases: the first holds both, hands one over when the second starts, and when it dies
(its bridges stop, its leases are not released, it ticks no more) the second adopts its slot
within BRIDGE_LEASE_S and drains what the broker kept in that slot's session meanwhile. A
clean stop hands every slot over."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from django.utils import timezone

from config.env import MqttConfig
from devices.models import BridgeProcess, BridgeSlot
from devices.mqtt.bridge import MqttBridge
from devices.mqtt.bridge.slots import BridgeSupervisor
from devices.mqtt.client import forget_session
from devices.mqtt.publisher import Publisher
from tests.waiting import wait_for

pytestmark = pytest.mark.django_db(transaction=True)

LEASE_S = 4.0  # renew every 1 s for 3 s: a dead holder's slot is adopted within 4 s
TICK_JITTER_S = 1.0  # a tick's own statements and a loaded machine's scheduling


class Recorder:
    """Stands in for the bridge's store: every payload it was handed, by slot."""

    def __init__(self) -> None:
        self.payloads: list[str] = []
        self._lock = threading.Lock()

    def __call__(self, task_name: str, batch: list[Any]) -> None:
        with self._lock:
            self.payloads.extend(str(row[1]) for row in batch)

    def seen(self) -> set[str]:
        with self._lock:
            return set(self.payloads)


def factory(config: MqttConfig, recorder: Recorder) -> Callable[..., MqttBridge]:
    def make(client_id: str, heartbeat: Callable[[str, bool], None]) -> MqttBridge:
        return MqttBridge(
            config=config,
            client_id=client_id,
            heartbeat=heartbeat,
            handoff=recorder,
            session_expiry_s=600,
            dedupe_ttl_s=0,
        )

    return make


class Ticking:
    """A supervisor ticking on a thread of its own until stopped (or until it dies)."""

    def __init__(self, supervisor: BridgeSupervisor) -> None:
        self.supervisor = supervisor
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        from django.db import connection

        try:
            while True:
                self.supervisor.tick()
                if self._stop.wait(self.supervisor.tick_s):
                    return
        finally:
            connection.close()

    def halt(self) -> None:
        self._stop.set()
        self._thread.join(30)

    def die(self) -> None:
        """Tick no more and stop the bridges, releasing nothing: a lost host."""
        self.halt()
        self.supervisor.abandon()

    def stop_cleanly(self) -> None:
        self.halt()
        self.supervisor.shutdown()

    def connected_slots(self) -> set[int]:
        return {n for n, b in self.supervisor.bridges().items() if b.wait_connected(0)}


@pytest.fixture
def prefix(mqtt_config: MqttConfig) -> Iterator[str]:
    prefix = f"test-slots-{uuid.uuid4().hex[:8]}"
    yield prefix
    for n in range(2):
        forget_session(mqtt_config, f"{prefix}/{n}")


def publish(config: MqttConfig, tag: str, count: int) -> set[str]:
    payloads = {f'{{"values":{{"n":{n}}},"tag":"{tag}"}}' for n in range(count)}
    publisher = Publisher(config=config)
    publisher.start()
    try:
        for payload in payloads:
            publisher.publish("devices/SLOT-1/telemetry", payload)
    finally:
        publisher.close()
    return payloads


def supervisor(prefix: str, name: str, config: MqttConfig, recorder: Recorder) -> Ticking:
    return Ticking(
        BridgeSupervisor(
            bridge_factory=factory(config, recorder),
            prefix=prefix,
            slots=2,
            lease_s=LEASE_S,
            holder=f"{name}:{uuid.uuid4().hex[:6]}",
        )
    )


def test_a_standby_adopts_a_dead_supervisors_slot_within_the_lease_and_drains_its_session(
    mqtt_config: MqttConfig, prefix: str
) -> None:
    if mqtt_config.shared_group is None:
        pytest.skip("needs a shared subscription group")
    a_seen, b_seen = Recorder(), Recorder()
    a = supervisor(prefix, "host-a:1", mqtt_config, a_seen)
    b: Ticking | None = None
    try:
        wait_for(lambda: a.connected_slots() == {0, 1}, "a holding both slots, connected")
        b = supervisor(prefix, "host-b:2", mqtt_config, b_seen)
        wait_for(
            lambda: a.connected_slots() == {0} and b.connected_slots() == {1},  # type: ignore[union-attr]
            "a handing slot 1 over to b",
        )
        before = publish(mqtt_config, "before", 20)
        wait_for(lambda: before <= a_seen.seen() | b_seen.seen(), "every message before")

        a.die()
        died = timezone.now()
        during = publish(mqtt_config, "during", 40)  # half of it kept in a's offline session

        wait_for(lambda: b.connected_slots() == {0, 1}, "b adopting slot 0")  # type: ignore[union-attr]
        adopted = BridgeSlot.objects.get(client_id=f"{prefix}/0")
        assert adopted.holder == b.supervisor.holder and adopted.version == 2
        took_s = (adopted.held_since - died).total_seconds()  # type: ignore[operator]
        assert took_s <= LEASE_S + TICK_JITTER_S, f"adopted {took_s:.1f}s after the death"
        wait_for(lambda: during <= b_seen.seen(), "b draining what a's session kept")
    finally:
        a.halt()
        a.supervisor.abandon()
        if b is not None:
            b.stop_cleanly()

    rows = BridgeSlot.objects.filter(client_id__startswith=f"{prefix}/")
    assert sorted(rows.values_list("holder", flat=True)) == ["", ""]  # handed over on stop
    assert not BridgeProcess.objects.filter(holder=b.supervisor.holder).exists()


def test_a_clean_stop_hands_the_slot_over_to_a_standby_at_once(
    mqtt_config: MqttConfig, prefix: str
) -> None:
    a = supervisor(prefix, "host-a:1", mqtt_config, Recorder())
    b: Ticking | None = None
    try:
        wait_for(lambda: a.connected_slots() == {0, 1}, "a holding both slots, connected")
        b = supervisor(prefix, "host-b:2", mqtt_config, Recorder())
        wait_for(lambda: b.connected_slots() == {1}, "b holding its share")  # type: ignore[union-attr]
        stopped = time.monotonic()
        a.stop_cleanly()
        wait_for(lambda: b.connected_slots() == {0, 1}, "b taking slot 0 over")  # type: ignore[union-attr]
        assert time.monotonic() - stopped < LEASE_S  # no wait for a lease to run out
        assert BridgeSlot.objects.get(client_id=f"{prefix}/0").version == 3
    finally:
        a.halt()
        a.supervisor.shutdown()
        if b is not None:
            b.stop_cleanly()
