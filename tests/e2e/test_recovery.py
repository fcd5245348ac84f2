"""Restart recovery: a dispatcher killed between publish and marking ``dispatched``, and the
bridge stopped while devices answer. Every command still ends final, none applied twice."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from django.utils import timezone

from automation.models import DeviceCommand
from automation.services.evaluate import endpoint_events_evaluate
from automation.services.ingest import telemetry_ingest
from config.env import MqttConfig
from devices.mqtt.bridge import MqttBridge
from devices.mqtt.messages import InboundTelemetry
from devtools.simulator import FaultMode
from tests.e2e.conftest import Pipeline, wait_final
from tests.real_servers import child_database_url
from tests.waiting import wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

ROOT = Path(__file__).resolve().parents[2]


def _child_env(mqtt: MqttConfig) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        DATABASE_URL=child_database_url(),
        MQTT_URL=f"mqtt://{mqtt.host}:{mqtt.port}",
        MQTT_PROTOCOL=str(mqtt.protocol),
        MQTT_SHARED_GROUP=mqtt.shared_group or "none",
        ACK_TIMEOUT_S="1",
        DISPATCH_LEASE_S="1",
    )
    return env


def test_dispatcher_killed_after_publish_recovers_without_a_second_apply(
    pipeline: Pipeline, mqtt_config: MqttConfig, settings: Any
) -> None:
    settings.DISPATCH_LEASE_S = 1.0
    sweep_after = settings.DISPATCH_SWEEP_AFTER_S
    settings.DISPATCH_SWEEP_AFTER_S = (
        600.0  # a slow child start must not lose the intent to the sweep
    )
    kit = pipeline.kit
    kit.rule()
    now = timezone.now()  # the child process runs on the real clock too
    payload = json.dumps({"ts": now.isoformat(), "values": {"temp": 35}})
    ids = telemetry_ingest(  # evaluated here, not by the worker: the child process dispatches
        messages=[InboundTelemetry(kit.sensor.serial_number, payload, now)]
    ).pending_event_ids
    (intent_id,) = endpoint_events_evaluate(event_ids=ids).pending_command_ids
    child = subprocess.run(
        [sys.executable, str(ROOT / "tests/e2e/dispatch_then_die.py"), str(intent_id)],
        cwd=ROOT,
        env=_child_env(mqtt_config),
        capture_output=True,
        text=True,
        timeout=90,
    )
    assert child.returncode == -signal.SIGKILL, child.stderr[-2000:]
    intent = DeviceCommand.objects.get(pk=intent_id)
    assert intent.status == "pending_dispatch" and intent.device_command_id
    settings.DISPATCH_SWEEP_AFTER_S = sweep_after  # the sweep is what recovers it
    (final,) = wait_final(DeviceCommand.objects.filter(pk=intent_id))
    assert final.status == "applied"
    assert final.device_command_id == intent.device_command_id
    serial = kit.actuator.serial_number
    assert pipeline.sim.requests[(serial, final.device_command_id)] == 2
    assert pipeline.applies(final.device_command_id) == 1


def test_bridge_stopped_while_the_device_answers(
    pipeline: Pipeline, mqtt_config: MqttConfig
) -> None:
    pipeline.fault(FaultMode.DELAY_ACK, delay_s=0.5)
    pipeline.kit.rule()
    pipeline.telemetry(temp=35)
    intent = wait_for(
        lambda: DeviceCommand.objects.filter(
            target_device=pipeline.kit.actuator, status="dispatched"
        ).first(),
        what="a dispatched command",
    )
    client_id = pipeline.bridge.client_id
    pipeline.bridge.stop()
    time.sleep(1.0)  # the device answers while no bridge is connected
    replacement = MqttBridge(config=mqtt_config, client_id=client_id, session_expiry_s=300)
    replacement.start()
    try:
        assert replacement.wait_connected(10)
        (final,) = wait_final(DeviceCommand.objects.filter(pk=intent.pk))
    finally:
        replacement.stop()
    assert final.status == "applied"
    assert pipeline.applies(final.device_command_id) == 1
