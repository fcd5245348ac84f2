"""Helpers for the operations-surface tests: a command driven through the real services (a
fake publish stands in for the broker), organisation members, API clients."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.utils import timezone

from automation.models import AutomationCommandIntent
from automation.services.dispatch import command_intent_dispatch
from automation.services.evaluate import endpoint_events_evaluate
from automation.services.ingest import telemetry_ingest
from automation.services.receipts import DeviceMessage, device_messages_record
from automation.services.reconcile import command_intent_reconcile
from devices.mqtt.messages import InboundTelemetry
from tests.common.factories import OrganizationMemberFactory
from tests.devices.factories import FarmKit, make_farm


def fake_publish(topic: str, payload: bytes) -> int:
    return 1


def make_intent(kit: FarmKit, temp: float = 31, ts: str = "2026-11-29T11:59:00Z") -> Any:
    """Telemetry over the rule's threshold → event → execution → pending intent."""
    payload = json.dumps({"ts": ts, "values": {"temp": temp}})
    ids = telemetry_ingest(
        messages=[InboundTelemetry(kit.sensor.serial_number, payload, timezone.now())]
    ).pending_event_ids
    result = endpoint_events_evaluate(event_ids=ids)
    return AutomationCommandIntent.objects.get(pk=result.pending_intent_ids[0])


def dispatch(intent: Any, now: datetime | None = None) -> Any:
    command_intent_dispatch(intent_id=intent.pk, publish=fake_publish, now=now)
    return AutomationCommandIntent.objects.get(pk=intent.pk)


def reply(intent: Any, kind: str, body: dict[str, Any]) -> Any:
    message = DeviceMessage(intent.target_serial_number, kind, json.dumps(body), timezone.now())
    for pk in device_messages_record(messages=[message]):
        command_intent_reconcile(intent_id=pk)
    return AutomationCommandIntent.objects.get(pk=intent.pk)


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
    command_intent_reconcile(intent_id=intent.pk, now=later)
    return AutomationCommandIntent.objects.get(pk=intent.pk)


@dataclass
class Tenant:
    kit: FarmKit
    user: User


def make_tenant(name: str, *, staff: bool = True) -> Tenant:
    kit = make_farm(prefix=name)
    user = User.objects.create_user(username=name, password="pw", is_staff=staff)
    OrganizationMemberFactory(user=user, organization=kit.farm.organization)
    return Tenant(kit=kit, user=user)


@pytest.fixture
def tenants(db: None) -> tuple[Tenant, Tenant]:
    return make_tenant("alpha"), make_tenant("beta")
