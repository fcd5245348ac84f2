"""``insert_ignore_returning`` fills what a row leaves out as ``objects.create`` would: the
model's defaults, NULL for a nullable field; conflicts are still absorbed."""

from __future__ import annotations

import pytest
from django.utils import timezone

from automation.models import AutomationEndpointEvent
from automation.states import EventStatus
from common.sql import insert_ignore_returning
from tests.devices.factories import make_farm

pytestmark = pytest.mark.django_db


def test_left_out_fields_get_their_defaults_and_conflicts_stay_absorbed() -> None:
    from devices.models import Telemetry

    kit = make_farm()
    now = timezone.now()
    [(telemetry_id,)] = insert_ignore_returning(
        Telemetry,
        [
            {
                "device": kit.sensor.pk,
                "raw_payload": "{}",
                "fingerprint": b"f" * 16,
                "message_ts": now,
                "received_at": now,
            }
        ],
    )
    row = {
        "device_instance_endpoint": kit.temp.pk,
        "source_telemetry": telemetry_id,
        "event_timestamp": now,
        "normalized_value": 31,
        "created_at": now,
    }
    assert len(insert_ignore_returning(AutomationEndpointEvent, [row])) == 1
    assert insert_ignore_returning(AutomationEndpointEvent, [row]) == []  # a duplicate
    event = AutomationEndpointEvent.objects.get()
    assert (event.processing_status, event.status_reason, event.processed_at) == (
        EventStatus.PENDING,
        "",
        None,
    )
