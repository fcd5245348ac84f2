"""Fixtures shared by the dispatcher's tests, and helpers that drive a command through the real
services (a fake publish stands in for the broker)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import datetime, timedelta
from typing import Any

import pytest
from django.utils import timezone

from automation.models import DeviceCommand
from automation.services.dispatch import command_dispatch
from automation.services.evaluate import endpoint_events_evaluate
from automation.services.ingest import telemetry_ingest
from automation.services.receipts import DeviceMessage, device_messages_record
from automation.services.reconcile import command_reconcile
from config.env import MqttConfig
from devices.mqtt.messages import InboundTelemetry
from devices.mqtt.publisher import Publisher
from tests.devices.factories import FarmKit


@pytest.fixture(scope="module")
def publisher(mqtt_config: MqttConfig) -> Iterator[Publisher]:
    """One connected publisher per module, as a dispatch worker holds one per process."""
    pub = Publisher(config=mqtt_config)
    pub.start()
    yield pub
    pub.close()


def fake_publish(topic: str, payload: bytes) -> int:
    return 1


def make_intent(kit: FarmKit, temp: float = 31, ts: str = "2026-11-29T11:59:00Z") -> Any:
    """Telemetry over the rule's threshold → event → execution → pending intent."""
    payload = json.dumps({"ts": ts, "values": {"temp": temp}})
    ids = telemetry_ingest(
        messages=[InboundTelemetry(kit.sensor.serial_number, payload, timezone.now())]
    ).pending_event_ids
    result = endpoint_events_evaluate(event_ids=ids)
    return DeviceCommand.objects.get(pk=result.pending_command_ids[0])


def dispatch(intent: Any, now: datetime | None = None) -> Any:
    command_dispatch(command_id=intent.pk, publish=fake_publish, now=now)
    return DeviceCommand.objects.get(pk=intent.pk)


def reply(intent: Any, kind: str, body: dict[str, Any]) -> Any:
    message = DeviceMessage(intent.target_serial_number, kind, json.dumps(body), timezone.now())
    for pk in device_messages_record(messages=[message]):
        command_reconcile(command_id=pk)
    return DeviceCommand.objects.get(pk=intent.pk)


def ack(intent: Any, code: str = "ok", status: str = "accepted") -> Any:
    body = {"commandId": intent.device_command_id, "status": status, "resultCode": code}
    return reply(intent, "rpc_response", body)


def state(intent: Any, value: Any) -> Any:
    body = {
        "commandId": intent.device_command_id,
        "reportedState": {"io1": value},
        "appliedAt": timezone.now().isoformat(),
    }
    return reply(intent, "state", body)


def time_out(intent: Any) -> Any:
    """Reconcile past the ack deadline: a timeout mark, then retrying (or expired)."""
    later = max(timezone.now(), (intent.deadline_at or timezone.now()) + timedelta(seconds=1))
    command_reconcile(command_id=intent.pk, now=later)
    return DeviceCommand.objects.get(pk=intent.pk)
