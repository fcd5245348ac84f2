"""A reading nobody evaluates costs no evaluation and no event row: ingest keeps it in its
telemetry row and its endpoint's reported value, where the series and the chart read it, and
hands no Celery task on for it, while a reading a rule or a threshold reminder reads is an
event that waits for evaluation as before. Which endpoints are read follows
the configuration version, so a condition added through the API holds for the next reading.
Whatever a reading may prove, ingest itself names the commands waiting for it, evaluated or
not, and the bridge hands those of one flush, acks and state reports included, to one
reconcile task."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from automation.models import AutomationEndpointEvent, DeviceCommand
from automation.services import edge
from automation.services.ingest import IngestResult, telemetry_ingest
from automation.states import EventStatus
from common.handoff import Nudger
from config.task_names import COMMANDS_RECONCILE, EVENTS_EVALUATE
from devices.models import DeviceMessageKind
from devices.mqtt.messages import DeviceMessage, InboundTelemetry
from devices.readings import device_readings
from devices.series import endpoint_series, series_window
from reminders.services.sources import endpoint_metric_source_create
from tests.automation.factories import relay_command
from tests.common.auth import token_client
from tests.conftest import Tenant
from tests.devices.factories import FarmKit, make_farm

pytestmark = pytest.mark.django_db


def _ingest(kit: FarmKit, serial: str | None = None, **values: Any) -> IngestResult:
    payload = json.dumps({"ts": timezone.now().isoformat(), "values": values})
    message = InboundTelemetry(serial or kit.sensor.serial_number, payload, timezone.now())
    return telemetry_ingest(messages=[message])


def _event(kit: FarmKit, endpoint_id: int) -> AutomationEndpointEvent:
    return AutomationEndpointEvent.objects.filter(device_instance_endpoint_id=endpoint_id).latest(
        "pk"
    )


def test_a_reading_no_rule_reads_writes_no_event_and_waits_for_nothing() -> None:
    kit = make_farm()
    kit.rule()  # reads temp, not humidity
    result = _ingest(kit, temp=25, humidity=70)
    assert result.events == 2  # both values accepted
    temp = _event(kit, kit.temp.pk)
    assert result.pending_event_ids == [temp.pk]
    assert temp.processing_status == EventStatus.PENDING
    assert not AutomationEndpointEvent.objects.filter(device_instance_endpoint=kit.humidity)
    kit.humidity.refresh_from_db()
    assert kit.humidity.last_value == 70  # what it last reported is kept all the same
    (reading,) = device_readings(
        device_ids=[kit.sensor.pk],
        types={(kit.sensor.pk, "humidity"): "number"},
        start=timezone.now() - timedelta(minutes=1),
        end=timezone.now(),
    )
    assert reading.value == 70  # and the reading itself, in its telemetry


def test_the_series_holds_a_reading_nobody_evaluates() -> None:
    """The unread reading is in the endpoint's series as an evaluated one is."""
    kit = make_farm()
    kit.rule(trigger_endpoint=kit.humidity)  # humidity read, so an event; temp not
    _ingest(kit, temp=10, humidity=10)
    now = timezone.now()
    window = series_window(start=now - timedelta(minutes=5), end=now, bucket_s=60, now=now)
    for endpoint in (kit.temp, kit.humidity):
        endpoint = type(endpoint).objects.select_related("profile_endpoint").get(pk=endpoint.pk)
        (point,) = endpoint_series(endpoint=endpoint, window=window)
        assert (point.count, point.last) == (1, 10.0)


def test_a_condition_added_through_the_api_holds_for_the_next_reading(
    tenants: tuple[Tenant, Tenant],
) -> None:
    kit = tenants[0].kit
    rule = kit.rule(threshold_value=30, target_value=True)
    assert _ingest(kit, humidity=40).pending_event_ids == []
    condition = {"endpoint": kit.humidity.pk, "operator": "gt", "threshold_value": 1}
    patched = token_client(tenants[0].user).patch(
        f"/api/v1/rules/{rule.pk}/", {"conditions": [condition]}, format="json"
    )
    assert patched.status_code == 200, patched.content
    assert _ingest(kit, humidity=41).pending_event_ids == [_event(kit, kit.humidity.pk).pk]


def test_a_threshold_reminders_metric_keeps_its_endpoint_read() -> None:
    kit = make_farm()
    assert _ingest(kit, humidity=40).pending_event_ids == []
    source = endpoint_metric_source_create(
        farm_id=kit.farm.pk,
        endpoint_id=kit.humidity.pk,
        metric_key="air_humidity",
        aggregate="latest",
        now=timezone.now(),
    )
    assert _ingest(kit, humidity=41).pending_event_ids == [_event(kit, kit.humidity.pk).pk]
    type(source).objects.filter(pk=source.pk).update(active=False)
    assert _ingest(kit, humidity=42).pending_event_ids == []


def _waiting_command(kit: FarmKit) -> DeviceCommand:
    sent = timezone.now() - timedelta(seconds=1)
    return relay_command(
        kit, at=sent, status="dispatched", dispatched_at=sent, first_dispatched_at=sent
    )


def test_telemetry_names_the_commands_it_may_prove_whoever_reads_it() -> None:
    kit = make_farm()
    command = _waiting_command(kit)
    result = _ingest(kit, kit.actuator.serial_number, io1=True)
    assert result.pending_event_ids == []  # no rule reads the relay
    assert result.awaiting_command_ids == [command.pk]
    assert _ingest(kit, temp=20).awaiting_command_ids == []  # not its endpoint


class _Recorded(Nudger):
    def __init__(self) -> None:
        super().__init__()
        self.sent: list[tuple[str, list[int]]] = []

    def __call__(self, name: str, ids: Any) -> None:
        if ids:
            self.sent.append((name, list(ids)))


def test_a_flushs_ack_state_report_and_telemetry_cross_to_one_reconcile_task(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """What a device answers a command with (its ack, its state report, its telemetry)
    arrives in one flush of the bridge, in its two groups (``bridge_batch_store`` commits
    each through these two): one reconcile nudge for them, at the flush's end."""
    nudges = _Recorded()
    monkeypatch.setattr(edge, "_nudge", nudges)
    kit = make_farm()
    kit.rule()
    command = _waiting_command(kit)
    serial, now = kit.actuator.serial_number, timezone.now()
    ack = {"commandId": command.device_command_id, "status": "accepted", "resultCode": "ok"}
    state = {"commandId": command.device_command_id, "values": {"io1": True}, "ts": now.isoformat()}
    edge.telemetry_store(
        messages=[
            InboundTelemetry(
                serial, json.dumps({"ts": now.isoformat(), "values": {"io1": True}}), now
            ),
            InboundTelemetry(
                kit.sensor.serial_number,
                json.dumps({"ts": now.isoformat(), "values": {"temp": 31}}),
                now,
            ),
        ]
    )
    edge.replies_store(
        messages=[
            DeviceMessage(serial, DeviceMessageKind.RPC_RESPONSE, json.dumps(ack), now),
            DeviceMessage(serial, DeviceMessageKind.STATE, json.dumps(state), now),
        ]
    )
    assert [name for name, _ in nudges.sent] == [EVENTS_EVALUATE]  # the sensor's temp only
    edge.bridge_flush_end()
    assert nudges.sent[1:] == [(COMMANDS_RECONCILE, [command.pk])]
    edge.bridge_flush_end()  # nothing new: nothing sent
    assert len(nudges.sent) == 2
