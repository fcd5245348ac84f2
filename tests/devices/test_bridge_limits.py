"""Flood and size bounds in the bridge, over the real broker: a device sending faster than its
token bucket allows is acknowledged and dropped but recorded (one summary rejection per
device per flush interval, not one write per message); another device is not slowed; an
oversized payload never reaches Celery and leaves a ``payload_too_large`` rejection."""

from __future__ import annotations

import re
import time
from collections.abc import Callable

import paho.mqtt.client as paho
import pytest
from django.utils import timezone
from prometheus_client import REGISTRY

from config.task_names import TELEMETRY_INGEST
from devices.models import DeviceMessageRejection
from devices.models import DeviceMessageRejectionReason as Reason
from devices.mqtt.bridge import MqttBridge
from devices.services import DroppedMessages, dropped_messages_record
from tests.devices.test_bridge import Recorder, publish_all, telemetry
from tests.waiting import wait_for

pytestmark = pytest.mark.django_db(transaction=True)

RATE, BURST = 50.0, 50
_COUNT = re.compile(r"^(\d+) message")


def _recorded(serial: str, reason: str) -> int:
    details = DeviceMessageRejection.objects.filter(
        serial_number=serial, reason_code=reason
    ).values_list("detail", flat=True)
    return sum(int(m.group(1)) for d in details if (m := _COUNT.match(d)))


def test_a_flooding_device_is_limited_recorded_and_others_are_not(
    make_bridge: Callable[..., MqttBridge], device: paho.Client, prefix: str
) -> None:
    recorder = Recorder()
    bridge = make_bridge(
        handoff=recorder, device_rate_per_s=RATE, device_burst=BURST, drop_flush_s=0.2
    )
    flooder, quiet = f"{prefix}-flood", f"{prefix}-quiet"
    sent = [telemetry(flooder, n) for n in range(500)]
    for n in range(40):  # the quiet device's messages are spread through the flood
        sent.insert(n * 12, telemetry(quiet, n))

    started = time.monotonic()
    publish_all(device, sent)

    def settled() -> bool:
        handed = len(recorder.args(flooder))
        return handed + bridge.stats.rate_limited >= 500 and len(recorder.args(quiet)) >= 40

    wait_for(settled, "every flood message handed off or dropped")
    elapsed = time.monotonic() - started
    handed = len(recorder.args(flooder, TELEMETRY_INGEST))
    assert BURST <= handed <= BURST + RATE * elapsed + 5, (handed, elapsed)
    assert len(recorder.args(quiet)) == 40  # its own bucket: never limited
    dropped = 500 - handed
    wait_for(lambda: _recorded(flooder, "rate_limited") == dropped, "drops recorded")
    rows = DeviceMessageRejection.objects.filter(serial_number=flooder)
    assert rows.count() <= elapsed / 0.2 + 5  # summaries, not a row per dropped message
    assert not DeviceMessageRejection.objects.filter(serial_number=quiet).exists()
    assert bridge.stats.rate_limited >= dropped
    wait_for(lambda: bridge.stats.acked >= 540, "every message acknowledged")


def test_an_oversized_payload_is_recorded_and_not_handed_off(
    make_bridge: Callable[..., MqttBridge], device: paho.Client, prefix: str
) -> None:
    recorder = Recorder()
    bridge = make_bridge(handoff=recorder, drop_flush_s=0.1)
    serial = f"{prefix}-big"
    topic = f"devices/{serial}/telemetry"
    big = b'{"values":{"pad":"' + b"x" * (70 * 1024) + b'"}}'

    publish_all(device, [(topic, big), telemetry(serial, 1)])

    wait_for(lambda: recorder.args(serial), "the small message handed off")
    wait_for(lambda: _recorded(serial, "payload_too_large") == 1, "the big one recorded")
    assert len(recorder.args(serial)) == 1
    row = DeviceMessageRejection.objects.get(serial_number=serial)
    assert len(row.raw_payload) <= 1024 and "bytes >" in row.detail
    assert bridge.stats.oversized >= 1


def test_a_database_error_while_recording_never_stops_the_bridge(
    make_bridge: Callable[..., MqttBridge], device: paho.Client, prefix: str
) -> None:
    calls: list[list[DroppedMessages]] = []

    def failing(drops: list[DroppedMessages]) -> None:
        calls.append(drops)
        if len(calls) == 1:
            raise RuntimeError("database is down")

    recorder = Recorder()
    bridge = make_bridge(
        handoff=recorder,
        device_rate_per_s=1.0,
        device_burst=1,
        drop_flush_s=0.1,
        drop_recorder=failing,
    )
    serial = f"{prefix}-db"
    publish_all(device, [telemetry(serial, n) for n in range(5)])

    wait_for(lambda: len(calls) >= 2, "a second recording attempt")
    assert bridge.stats.drop_record_failures == 1
    assert sum(d.count for d in calls[-1] if d.serial == serial) == 5 - len(recorder.args(serial))
    publish_all(device, [telemetry(f"{prefix}-after", 1)])
    wait_for(lambda: recorder.args(f"{prefix}-after"), "the bridge still hands off")


def test_bridge_drops_are_counted_by_the_messages_they_sum() -> None:
    labels = {"kind": "telemetry", "reason": "rate_limited"}
    before = REGISTRY.get_sample_value("farm_device_message_rejections_total", labels) or 0.0
    now = timezone.now()
    drop = DroppedMessages("SN-FLOOD", "telemetry", Reason.RATE_LIMITED, 7, now, now, "{}")
    assert dropped_messages_record(drops=[drop]) == 1
    assert REGISTRY.get_sample_value("farm_device_message_rejections_total", labels) == before + 7
