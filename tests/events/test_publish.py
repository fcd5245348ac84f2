"""Publishing: an event leaves only after its transaction commits, carries the seed-002
envelope, and a dead broker never fails or rolls back the business write."""

from __future__ import annotations

import logging
import re
import uuid

import pytest
from django.db import transaction

from devices.models import Device, DeviceStatus
from devices.services import device_status_change
from events.envelope import Envelope
from events.services import EventPayloadInvalid, event_publish
from tests.devices.factories import DeviceFactory
from tests.events.transport import event_transport

PAYLOAD = {"farm": "f", "level": 1}


@pytest.mark.django_db(transaction=True)
def test_event_is_sent_only_after_the_transaction_commits(sent, ping) -> None:
    with transaction.atomic():
        envelope = event_publish(ping, idempotency_key="ping:1", payload={"farm": "f", "level": 3})
        assert sent == []
    assert sent == [envelope.to_message()]


@pytest.mark.django_db(transaction=True)
def test_a_rolled_back_transaction_publishes_nothing(sent) -> None:
    device = DeviceFactory()
    with pytest.raises(RuntimeError), transaction.atomic():
        assert device_status_change(device_id=device.pk, status="maintenance", actor="ops")
        raise RuntimeError("the business operation failed after the status change")
    device.refresh_from_db()
    assert device.status == DeviceStatus.ACTIVE
    assert sent == []


@pytest.mark.django_db
def test_rolled_back_savepoint_registers_no_send(sent, ping, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True) as callbacks:
        with pytest.raises(RuntimeError), transaction.atomic():
            event_publish(ping, idempotency_key="ping:2", payload={"farm": "f", "level": 1})
            raise RuntimeError("rolled back")
        event_publish(ping, idempotency_key="ping:3", payload={"farm": "f", "level": 1})
    assert len(callbacks) == 1
    assert [m["idempotency_key"] for m in sent] == ["ping:3"]


@pytest.mark.django_db
def test_device_status_change_publishes_the_seed_envelope(
    sent, settings, django_capture_on_commit_callbacks
) -> None:
    settings.EVENT_PRODUCER = "farm-core-test"
    device = DeviceFactory()
    with django_capture_on_commit_callbacks(execute=True):
        assert device_status_change(device_id=device.pk, status="retired", actor="alice")
        assert not device_status_change(device_id=device.pk, status="retired", actor="alice")
    assert len(sent) == 1
    message = sent[0]
    assert set(message) == {
        "event_id",
        "idempotency_key",
        "type",
        "occurred_at",
        "producer",
        "version",
        "payload",
    }
    uuid.UUID(message["event_id"])
    assert message["type"] == "DeviceStatusChanged"
    assert message["version"] == 1
    assert message["producer"] == "farm-core-test"
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z", message["occurred_at"])
    assert message["idempotency_key"].startswith(f"device-status:{device.pk}:active:retired:")
    assert message["payload"] == {
        "device_id": device.pk,
        "serial_number": device.serial_number,
        "farm_id": device.farm_id,
        "old_status": "active",
        "new_status": "retired",
        "actor": "alice",
    }
    assert Envelope.from_message(message).to_message() == message


@pytest.mark.django_db(transaction=True)
def test_broker_down_the_business_write_commits_and_the_failure_is_logged(
    caplog, dead_broker
) -> None:
    device = DeviceFactory()
    caplog.set_level(logging.ERROR)
    with event_transport(dead_broker):
        changed = device_status_change(device_id=device.pk, status="maintenance", actor="ops")
    assert changed
    assert Device.objects.get(pk=device.pk).status == DeviceStatus.MAINTENANCE
    failures = [r for r in caplog.records if r.getMessage().startswith("EVENT_PUBLISH_FAILED")]
    assert len(failures) == 1
    line = failures[0].getMessage()
    assert "type=DeviceStatusChanged" in line
    assert f"idempotency_key=device-status:{device.pk}:active:maintenance:" in line
    assert "OperationalError" in line
    assert failures[0].__dict__["idempotencyKey"].startswith(f"device-status:{device.pk}:")


@pytest.mark.django_db
def test_a_payload_that_breaks_the_schema_fails_at_the_producer(sent, ping) -> None:
    with pytest.raises(EventPayloadInvalid, match="level: expected int"):
        event_publish(ping, idempotency_key="k", payload={"farm": "f", "level": "high"})
    with pytest.raises(EventPayloadInvalid, match="extra: not in the schema"):
        event_publish(ping, idempotency_key="k", payload={**PAYLOAD, "extra": 1})
    with pytest.raises(ValueError, match="idempotency_key"):
        event_publish(ping, idempotency_key="", payload={"farm": "f", "level": 1})
    assert sent == []
