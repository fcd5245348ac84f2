"""The bridge's configured store on a real broker and database: what a device sent is
committed (telemetry with its events, replies as receipts, a refused message as a rejection
with its reason) before the bridge acknowledges it, and a Celery broker that takes no nudge
loses nothing: the events wait in SQL for the sweep."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import paho.mqtt.client as paho
import pytest
from django.utils import timezone

from automation.models import AutomationEndpointEvent, DeviceCommandReceipt
from automation.services import edge
from automation.services.evaluate import endpoint_events_pending
from common.handoff import Nudger
from config.task_names import COMMANDS_RECONCILE
from devices.models import DeviceMessageRejection, Telemetry
from devices.mqtt.bridge import MqttBridge
from devices.readings import Reading, device_readings
from tests.automation.factories import relay_command
from tests.devices.factories import FarmKit, make_farm
from tests.devices.test_bridge import publish_all
from tests.waiting import wait_for

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def kit() -> FarmKit:
    return make_farm(prefix=f"st-{uuid.uuid4().hex[:6]}-")


@pytest.fixture
def broker_down(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """Every nudge fails, as with the Celery broker down or restarted empty."""
    tried: list[str] = []

    class Down(Nudger):
        def __call__(self, name: str, ids: Any) -> None:
            tried.append(name)
            self.lost += 1

    monkeypatch.setattr(edge, "_nudge", Down())
    yield tried


def _readings(kit: FarmKit, key: str) -> list[Reading]:
    return list(
        device_readings(
            device_ids=[kit.sensor.pk],
            types={(kit.sensor.pk, key): "number"},
            start=timezone.now() - timedelta(days=1),
            end=timezone.now(),
        )
    )


def reading(kit: FarmKit, n: int) -> tuple[str, bytes]:
    ts = (timezone.now() - timedelta(seconds=60 - n)).isoformat()
    body = f'{{"ts":"{ts}","values":{{"temp":{20 + n},"humidity":50}}}}'
    return f"devices/{kit.sensor.serial_number}/telemetry", body.encode()


def test_telemetry_is_committed_before_it_is_acknowledged_and_waits_for_the_sweep(
    make_bridge: Callable[..., MqttBridge],
    device: paho.Client,
    kit: FarmKit,
    broker_down: list[str],
) -> None:
    kit.rule()  # reads temp: its readings wait for evaluation, humidity's for nothing
    bridge = make_bridge(flush_ms=5)  # the configured store: BRIDGE_STORE
    acked_before: list[tuple[int, int]] = []
    store = bridge._batcher._handoff  # observed at each commit

    def observed(group: str, batch: list[Any]) -> None:
        store(group, batch)
        acked_before.append((bridge.stats.acked, Telemetry.objects.count()))

    bridge._batcher._handoff = observed
    publish_all(device, [reading(kit, n) for n in range(10)])

    wait_for(lambda: bridge.stats.acked >= 10, "ten acknowledged")
    rows = Telemetry.objects.filter(device=kit.sensor)
    assert rows.count() == 10
    assert all(acked < stored for acked, stored in acked_before)  # stored, then acked
    # temp's readings are events waiting for evaluation; humidity's, read by nothing, are
    # kept in their telemetry only (``devices.readings``).
    events = AutomationEndpointEvent.objects.filter(device_instance_endpoint__device=kit.sensor)
    assert "automation.endpoint_events_evaluate" in broker_down
    pending = endpoint_events_pending(older_than=timezone.now(), limit=100)
    assert events.count() == events.filter(device_instance_endpoint=kit.temp).count() == 10
    assert set(events.values_list("pk", flat=True)) <= set(pending)
    assert [r.value for r in _readings(kit, "humidity")] == [50] * 10


def test_a_redelivered_reading_is_stored_once(
    make_bridge: Callable[..., MqttBridge], device: paho.Client, kit: FarmKit
) -> None:
    kit.rule()  # reads temp: one event per reading
    bridge = make_bridge(flush_ms=5, dedupe_ttl_s=0)  # the unique keys alone
    once = reading(kit, 1)
    publish_all(device, [once])
    wait_for(lambda: bridge.stats.acked >= 1, "the first copy")
    publish_all(device, [once, once])
    wait_for(lambda: bridge.stats.acked >= 3, "the copies acknowledged")
    assert Telemetry.objects.filter(device=kit.sensor).count() == 1
    assert (
        AutomationEndpointEvent.objects.filter(device_instance_endpoint__device=kit.sensor).count()
        == 1
    )
    assert [r.value for r in _readings(kit, "humidity")] == [50]


def test_replies_are_committed_as_receipts_and_refusals_as_rejections(
    make_bridge: Callable[..., MqttBridge],
    device: paho.Client,
    kit: FarmKit,
    broker_down: list[str],
) -> None:
    command = relay_command(kit, at=timezone.now(), status="dispatched")
    bridge = make_bridge(flush_ms=5)
    command_id = command.device_command_id
    response = f'{{"commandId":"{command_id}","status":"accepted","resultCode":"ok"}}'
    serial = kit.actuator.serial_number
    publish_all(
        device,
        [
            (f"devices/{serial}/rpc/response", response.encode()),
            (f"devices/{serial}/state", b"{not json"),
            (f"devices/no-such-{uuid.uuid4().hex[:6]}/telemetry", b'{"values":{"t":1}}'),
        ],
    )

    wait_for(lambda: bridge.stats.acked >= 3, "all three acknowledged")
    assert DeviceCommandReceipt.objects.filter(command=command).count() == 1
    reasons = set(
        DeviceMessageRejection.objects.filter(received_at__gte=command.created_at).values_list(
            "reason_code", flat=True
        )
    )
    assert {"invalid_json", "unknown_device"} <= reasons
    assert COMMANDS_RECONCILE in broker_down
