"""Chaos on the Celery side: a batch of commands across devices with mixed faults while the
worker is stopped and restarted mid-run. Tasks wait in the broker (or are redelivered after
the late ack never came) and sweeps re-derive the rest, so every command still ends final and
no device applies a commandId twice, on Redis, RabbitMQ and the embedded memory broker."""

from __future__ import annotations

import time
from contextlib import ExitStack
from datetime import UTC, datetime
from typing import Any

import pytest

from automation.models import AutomationEndpointEvent, DeviceCommand
from automation.states import COMMAND_TERMINAL
from config.celery import app as celery_app
from config.env import MqttConfig
from devices.mqtt.bridge import MqttBridge
from devtools.runtime import in_process_beat, in_process_worker
from devtools.simulator import DeviceSimulator, FaultMode, SimulatedDevice
from tests.devices.factories import FarmKit, make_farm
from tests.waiting import wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

# One relay per entry, three rules each (io1, fan, mode): 10 devices, 30 commands.
FAULTS: list[tuple[FaultMode, dict[str, Any]]] = [
    (FaultMode.NONE, {}),
    (FaultMode.DROP_ACK, {"fault_times": 1}),
    (FaultMode.DELAY_ACK, {"delay_s": 0.3}),
    (FaultMode.DUPLICATE_ACK, {}),
    (FaultMode.REJECT, {"reject_code": "busy", "fault_times": 1}),
    (FaultMode.NEVER_APPLY, {}),
    (FaultMode.NONE, {}),
    (FaultMode.DROP_ACK, {"fault_times": 1}),
    (FaultMode.DUPLICATE_ACK, {}),
    (FaultMode.NONE, {}),
]
TARGETS: tuple[tuple[str, Any], ...] = (("io1", True), ("fan", 75), ("mode", "manual"))
QUIESCE_TIMEOUT_S = 45.0


def _kits() -> list[FarmKit]:
    stamp = time.monotonic_ns() % 10**7
    kits = [make_farm(prefix=f"CH{stamp}-{n}") for n in range(len(FAULTS))]
    for kit in kits:
        for key, value in TARGETS:
            kit.rule(target_endpoint=getattr(kit, key), target_value=value, name=f"set {key}")
    return kits


def test_worker_restarted_mid_run_loses_and_duplicates_nothing(
    fast_timers: None, mqtt_config: MqttConfig, bridge_client_id: str, settings: Any
) -> None:
    # The applied window must outlast the outage: evidence queued while no worker runs is
    # recorded only after the restart, and the window is measured against what is recorded.
    settings.APPLIED_WINDOW_S = 6.0
    kits = _kits()
    sim = DeviceSimulator(
        [SimulatedDevice(k.sensor.serial_number, {"temp": 20.0}) for k in kits]
        + [
            SimulatedDevice(k.actuator.serial_number, {"io1": False, "fan": 0, "mode": "auto"})
            for k in kits
        ],
        config=mqtt_config,
        client_id=f"sim-{bridge_client_id}",
    )
    for kit, (mode, options) in zip(kits, FAULTS, strict=True):
        sim.set_fault(kit.actuator.serial_number, mode, **options)
    intents = DeviceCommand.objects.filter(target_device__in=[k.actuator for k in kits])
    expected = len(kits) * len(TARGETS)
    celery_app.control.purge()  # stale messages of earlier runs name rows that are gone
    with ExitStack() as stack:
        worker = ExitStack()
        stack.callback(lambda: worker.close())  # whichever worker runs at the end
        worker.enter_context(in_process_worker(concurrency=4))
        stack.enter_context(in_process_beat(tick_s=0.05))
        bridge = MqttBridge(config=mqtt_config, client_id=bridge_client_id, session_expiry_s=300)
        bridge.start()
        stack.callback(bridge.stop)
        assert bridge.wait_connected(10), "bridge did not connect"
        sim.start()
        stack.callback(sim.stop)

        started = time.monotonic()
        for kit in kits:
            assert sim.publish_telemetry(kit.sensor.serial_number, {"temp": 35}, ts=_now())
        wait_for(lambda: intents.filter(dispatched_at__isnull=False).count() >= 5, what="5 sent")
        worker.close()  # the crude "worker killed": beat and the bridge keep enqueueing
        time.sleep(1.5)  # acks, state reports and sweeps pile up in the broker meanwhile
        worker = ExitStack()
        worker.enter_context(in_process_worker(concurrency=4))

        def quiet() -> bool:
            statuses = list(intents.values_list("status", flat=True))
            return len(statuses) >= expected and set(statuses) <= COMMAND_TERMINAL

        wait_for(quiet, f"{expected} final commands", QUIESCE_TIMEOUT_S)
        elapsed = time.monotonic() - started

    rows = list(intents)
    applies = {
        (k.actuator.serial_number, i.device_command_id): sim.applies[
            (k.actuator.serial_number, i.device_command_id or "")
        ]
        for k in kits
        for i in rows
        if i.target_device_id == k.actuator.pk
    }
    duplicated = sum(1 for n in applies.values() if n > 1)
    lost = expected - sum(1 for r in rows if r.status in COMMAND_TERMINAL)
    pending = AutomationEndpointEvent.objects.filter(
        device_instance_endpoint__device__in=[k.sensor for k in kits], processing_status="pending"
    ).count()
    counts = {s: sum(1 for r in rows if r.status == s) for s in ("applied", "uncertain")}
    retried = sum(1 for r in rows if r.attempt_count > 1)
    print(
        f"\nchaos[{celery_app.conf.broker_url.split(':', 1)[0]}]: commands={len(rows)} "
        f"applied={counts['applied']} retried={retried} uncertain={counts['uncertain']} "
        f"lost={lost} duplicated={duplicated} pending_events={pending} in {elapsed:.1f}s"
    )
    assert len(rows) == expected
    assert lost == 0 and duplicated == 0 and pending == 0
    assert all(n <= 1 for n in applies.values())
    never_apply = kits[[m for m, _ in FAULTS].index(FaultMode.NEVER_APPLY)].actuator
    assert {r.status for r in rows if r.target_device_id != never_apply.pk} == {"applied"}
    assert retried >= 1


def _now() -> datetime:
    return datetime.now(UTC)
