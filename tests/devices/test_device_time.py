"""Device time cannot poison an endpoint: a reading stamped far ahead of the server clock (or
far behind it) is rejected with its reason code, on the ingest task the bridge feeds and in
the service alike, and the endpoint keeps taking real readings."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest
import time_machine
from prometheus_client import REGISTRY

from automation.models import AutomationEndpointEvent, DeviceCommand
from automation.services.evaluate import endpoint_events_evaluate
from automation.services.ingest import IngestResult, telemetry_ingest
from automation.tasks import telemetry_ingest_task
from devices.models import DeviceMessageRejection, Telemetry
from devices.mqtt.messages import InboundTelemetry
from devices.timestamps import device_time_violation
from tests.devices.factories import make_farm

pytestmark = pytest.mark.django_db

NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
REJECTIONS_METRIC = "farm_device_message_rejections_total"


@pytest.fixture(autouse=True)
def _server_clock(settings) -> Iterator[None]:
    settings.TELEMETRY_MAX_FUTURE_S = 300  # the defaults, whatever the environment says
    settings.TELEMETRY_MAX_AGE_S = 7 * 24 * 3600
    with time_machine.travel(NOW, tick=False):
        yield


def test_one_pure_check_bounds_device_time_by_the_server_clock() -> None:
    ahead, behind = timedelta(seconds=300), timedelta(days=7)
    assert device_time_violation(NOW + ahead, NOW) is None
    assert device_time_violation(NOW - behind, NOW) is None
    assert (
        device_time_violation(NOW + ahead + timedelta(microseconds=1), NOW) == "timestamp_in_future"
    )
    assert (
        device_time_violation(NOW - behind - timedelta(microseconds=1), NOW) == "timestamp_too_old"
    )
    assert device_time_violation(datetime.max.replace(tzinfo=UTC), NOW) == "timestamp_in_future"
    assert device_time_violation(datetime.min.replace(tzinfo=UTC), NOW) == "timestamp_too_old"


def _message(serial: str, ts: str, **values: object) -> InboundTelemetry:
    return InboundTelemetry(serial, json.dumps({"ts": ts, "values": values}), NOW)


def _ingest(serial: str, ts: str, **values: object) -> IngestResult:
    return telemetry_ingest(messages=[_message(serial, ts, **values)])


def test_a_reading_from_year_9999_is_rejected_and_later_readings_still_act() -> None:
    kit = make_farm()
    kit.rule(operator="gt", threshold_value=30, target_value=True)
    serial = kit.sensor.serial_number
    poisoned = _ingest(serial, "9999-12-31T23:59:59Z", temp=10)
    assert (poisoned.telemetry, poisoned.events, poisoned.rejections) == (0, 0, 1)
    rejection = DeviceMessageRejection.objects.get()
    assert (rejection.serial_number, rejection.kind) == (serial, "telemetry")
    assert rejection.reason_code == "timestamp_in_future"
    assert "9999-12-31" in rejection.detail
    real = _ingest(serial, "2026-11-29T11:59:58Z", temp=35)
    endpoint_events_evaluate(event_ids=real.pending_event_ids)
    event = AutomationEndpointEvent.objects.get()
    assert (event.processing_status, event.status_reason) == ("processed", "rule_matched")
    assert DeviceCommand.objects.count() == 1
    kit.temp.refresh_from_db()
    assert kit.temp.last_value == 35
    assert kit.temp.last_value_at == datetime(2026, 11, 29, 11, 59, 58, tzinfo=UTC)


@pytest.mark.parametrize(
    ("ts", "reason"),
    [
        ("9999-12-31T23:59:59Z", "timestamp_in_future"),
        ("2026-11-29T12:05:01Z", "timestamp_in_future"),  # 301 s ahead
        ("2026-11-29T13:00:00+00:30", "timestamp_in_future"),  # 30 min ahead, with an offset
        ("0001-01-01T00:00:00Z", "timestamp_too_old"),
        ("2026-11-22T11:59:59Z", "timestamp_too_old"),  # 7 days and 1 s
    ],
)
def test_the_bridges_ingest_task_rejects_device_time_out_of_bounds(ts: str, reason: str) -> None:
    kit = make_farm()
    message = _message(kit.sensor.serial_number, ts, temp=21)
    telemetry_ingest_task.apply(args=[[message.to_task_arg()]]).get()
    assert list(DeviceMessageRejection.objects.values_list("reason_code", flat=True)) == [reason]
    assert Telemetry.objects.count() == AutomationEndpointEvent.objects.count() == 0
    kit.temp.refresh_from_db()
    assert kit.temp.last_value_at is None


@pytest.mark.parametrize("ts", ["2026-11-29T12:05:00Z", "2026-11-22T12:00:00Z"])
def test_readings_on_the_bounds_are_kept(ts: str) -> None:
    kit = make_farm()
    result = _ingest(kit.sensor.serial_number, ts, temp=21)
    assert (result.telemetry, result.events, result.rejections) == (1, 1, 0)


def test_the_bounds_are_settings(settings) -> None:
    settings.TELEMETRY_MAX_FUTURE_S = 10
    settings.TELEMETRY_MAX_AGE_S = 60
    kit = make_farm()
    serial = kit.sensor.serial_number
    result = telemetry_ingest(
        messages=[
            _message(serial, "2026-11-29T12:00:11Z", temp=1),
            _message(serial, "2026-11-29T11:58:59Z", temp=2),
            _message(serial, "2026-11-29T11:59:30Z", temp=3),
        ]
    )
    assert (result.telemetry, result.events) == (1, 1)
    reasons = DeviceMessageRejection.objects.order_by("pk").values_list("reason_code", flat=True)
    assert list(reasons) == ["timestamp_in_future", "timestamp_too_old"]


def test_a_message_without_ts_is_bounded_by_its_received_time() -> None:
    kit = make_farm()
    late = datetime(2026, 11, 1, tzinfo=UTC)  # a gateway forwarding an old backlog
    payload = json.dumps({"values": {"temp": 1}})
    telemetry_ingest(messages=[InboundTelemetry(kit.sensor.serial_number, payload, late)])
    assert DeviceMessageRejection.objects.get().reason_code == "timestamp_too_old"


def test_clock_rejections_are_counted_by_reason(django_capture_on_commit_callbacks) -> None:
    kit = make_farm()
    labels = {"kind": "telemetry", "reason": "timestamp_in_future"}
    before = REGISTRY.get_sample_value(REJECTIONS_METRIC, labels) or 0.0
    with django_capture_on_commit_callbacks(execute=True):
        _ingest(kit.sensor.serial_number, "9999-12-31T23:59:59Z", temp=1)
        _ingest(kit.sensor.serial_number, "2030-01-01T00:00:00Z", temp=1)
    assert REGISTRY.get_sample_value(REJECTIONS_METRIC, labels) == before + 2
