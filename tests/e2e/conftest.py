"""The whole pipeline in one process, on real parts: the configured Celery broker with an
in-process worker and beat, the MQTT bridge, the device simulator and the broker named by
MQTT_URL (embedded amqtt when unset). Timers are shortened so retries take seconds."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.db.models import QuerySet

from automation.models import DeviceCommand
from automation.states import COMMAND_TERMINAL
from config.celery import app as celery_app
from config.env import MqttConfig
from devices.mqtt.bridge import MqttBridge
from devices.mqtt.client import forget_session
from devtools.runtime import in_process_beat, in_process_worker
from devtools.simulator import DeviceSimulator, FaultMode, SimulatedDevice
from tests.devices.factories import FarmKit, make_farm
from tests.waiting import wait_for

FINAL_TIMEOUT_S = 30.0


@dataclass
class Pipeline:
    kit: FarmKit
    sim: DeviceSimulator
    bridge: MqttBridge
    clock: list[datetime] = field(default_factory=lambda: [datetime.now(UTC)])

    def telemetry(self, serial: str | None = None, **values: Any) -> None:
        """Publish telemetry with a fresh timestamp (a new reading, not a redelivery)."""
        self.clock[0] += timedelta(milliseconds=10)
        sent = self.sim.publish_telemetry(
            serial or self.kit.sensor.serial_number, values, ts=self.clock[0]
        )
        assert sent, "simulator could not publish telemetry"

    def fault(self, mode: FaultMode, **kw: Any) -> None:
        self.sim.set_fault(self.kit.actuator.serial_number, mode, **kw)

    def applies(self, command_id: str | None) -> int:
        return self.sim.applies[(self.kit.actuator.serial_number, command_id or "")]


def wait_final(
    intents: QuerySet[DeviceCommand], count: int = 1, timeout_s: float = FINAL_TIMEOUT_S
) -> list[DeviceCommand]:
    """Wait until ``count`` intents exist and all are in a final state."""

    def done() -> list[DeviceCommand] | None:
        rows = list(intents.order_by("pk"))
        if len(rows) >= count and all(r.status in COMMAND_TERMINAL for r in rows):
            return rows
        return None

    return wait_for(done, f"{count} final intent(s)", timeout_s)


@pytest.fixture
def fast_timers(settings: Any) -> None:
    settings.ACK_TIMEOUT_S = 1.0
    settings.RETRY_BACKOFF_S = (0.3, 0.6, 1.2)
    settings.RETRY_JITTER_RATIO = 0.1
    settings.APPLIED_WINDOW_S = 1.5
    settings.COMMAND_SWEEP_INTERVAL_S = 0.2
    settings.DISPATCH_SWEEP_AFTER_S = 2.0
    settings.EVENT_SWEEP_AFTER_S = 3.0
    settings.BEAT_SWEEP_INTERVAL_S = 1.0
    settings.DEVICE_FRESHNESS_S = 3600


@pytest.fixture
def workers(fast_timers: None, transactional_db: None, mqtt_config: MqttConfig) -> Iterator[None]:
    celery_app.control.purge()  # stale messages of earlier runs name rows that are gone
    with in_process_worker(concurrency=4), in_process_beat(tick_s=0.05):
        yield


@pytest.fixture
def bridge_client_id(mqtt_config: MqttConfig) -> Iterator[str]:
    """The test's bridge session, forgotten afterwards: an offline persistent session left in
    the shared group would keep receiving its share of every later test's messages."""
    client_id = f"e2e-bridge-{uuid.uuid4().hex[:8]}"
    yield client_id
    forget_session(mqtt_config, client_id)


@pytest.fixture
def bridge(workers: None, mqtt_config: MqttConfig, bridge_client_id: str) -> Iterator[MqttBridge]:
    bridge = MqttBridge(config=mqtt_config, client_id=bridge_client_id, session_expiry_s=300)
    bridge.start()
    assert bridge.wait_connected(10), "bridge did not connect"
    yield bridge
    bridge.stop()


@pytest.fixture
def pipeline(bridge: MqttBridge, mqtt_config: MqttConfig) -> Iterator[Pipeline]:
    kit = make_farm(prefix=f"E2E{time.monotonic_ns() % 10**8}")
    sim = DeviceSimulator(
        [
            SimulatedDevice(kit.sensor.serial_number, {"temp": 20.0, "humidity": 50}),
            SimulatedDevice(kit.actuator.serial_number, {"io1": False, "fan": 0, "mode": "auto"}),
        ],
        config=mqtt_config,
        client_id=f"sim-{kit.actuator.serial_number}",
    )
    sim.start()
    yield Pipeline(kit, sim, bridge)
    sim.stop()
