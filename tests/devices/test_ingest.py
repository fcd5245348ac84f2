"""Telemetry ingestion: valid messages become events once; bad ones leave a reason."""

from __future__ import annotations

import json
import threading
from datetime import UTC, datetime, timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from automation.models import AutomationEndpointEvent, DeviceCommand
from automation.services.evaluate import endpoint_events_evaluate
from automation.services.ingest import MAX_TELEMETRY_BYTES, telemetry_accept, telemetry_ingest
from automation.services.rule_cache import endpoints_read
from config.task_names import EVENTS_EVALUATE
from devices.models import DeviceMessageRejection, DeviceStatus, Telemetry
from devices.mqtt.messages import InboundTelemetry
from devices.readings import device_readings
from tests.devices.factories import make_farm

NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)


def message(serial: str, payload: str | bytes | dict) -> InboundTelemetry:
    if isinstance(payload, dict):
        payload = json.dumps(payload)
    if isinstance(payload, bytes):
        return InboundTelemetry.from_bytes(serial, payload, NOW)
    return InboundTelemetry(serial, payload, NOW)


def telemetry(ts: str = "2026-11-29T11:59:58Z", **values: object) -> dict:
    return {"ts": ts, "values": values}


pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("clock_at_fixture_dates")]


def test_valid_message_persists_telemetry_and_one_event_per_known_endpoint() -> None:
    kit = make_farm()
    kit.rule()  # rules read both endpoints: their events wait for evaluation
    kit.rule(trigger_endpoint=kit.humidity)
    result = telemetry_ingest(
        messages=[message(kit.sensor.serial_number, telemetry(temp=31.5, humidity=40, extra=1))]
    )
    assert result.telemetry == 1
    events = AutomationEndpointEvent.objects.order_by("device_instance_endpoint_id")
    assert {e.device_instance_endpoint_id: e.normalized_value for e in events} == {
        kit.temp.pk: 31.5,
        kit.humidity.pk: 40,
    }
    assert all(e.processing_status == "pending" for e in events)
    assert sorted(result.pending_event_ids) == sorted(e.pk for e in events)
    kit.sensor.refresh_from_db()
    kit.temp.refresh_from_db()
    assert kit.sensor.last_seen_at is not None
    assert kit.temp.last_value == 31.5
    assert kit.temp.last_value_at == datetime(2026, 11, 29, 11, 59, 58, tzinfo=UTC)


def test_redelivered_message_creates_nothing_new() -> None:
    kit = make_farm()
    kit.rule()  # reads temp: one event
    msg = message(kit.sensor.serial_number, telemetry(temp=31.5))
    for _ in range(5):
        telemetry_ingest(messages=[msg, msg])
    assert Telemetry.objects.count() == 1
    assert AutomationEndpointEvent.objects.count() == 1


def test_older_message_does_not_overwrite_newer_last_value() -> None:
    kit = make_farm()
    serial = kit.sensor.serial_number
    telemetry_ingest(messages=[message(serial, telemetry("2026-11-29T11:00:00Z", temp=25))])
    telemetry_ingest(messages=[message(serial, telemetry("2026-11-29T10:00:00Z", temp=20))])
    kit.temp.refresh_from_db()
    assert kit.temp.last_value == 25


def test_events_are_handed_on_only_after_commit(
    django_capture_on_commit_callbacks, monkeypatch
) -> None:
    """The ways in besides the bridge (HTTP, an older bridge's batches) hand the new events
    to evaluation after commit, through the same stage order as the bridge."""
    kit = make_farm()
    kit.rule()  # a rule reads temp: its event waits for evaluation
    received: list[tuple[str, list[int]]] = []
    monkeypatch.setattr(
        "automation.services.spine.enqueue", lambda name, ids, **_: received.append((name, ids))
    )
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        result = telemetry_accept(
            messages=[message(kit.sensor.serial_number, telemetry(temp=1))],
        )
    assert received == []  # nothing evaluated inline
    for callback in callbacks:
        callback()
    assert received == [(EVENTS_EVALUATE, result.pending_event_ids)]
    assert len(result.pending_event_ids) == 1


@pytest.mark.parametrize(
    ("payload", "reason"),
    [
        ("{not json", "invalid_json"),
        ("[1, 2]", "not_an_object"),
        (json.dumps({"ts": "2026-11-29T11:00:00Z"}), "missing_values"),
        (json.dumps({"values": [1]}), "missing_values"),
        (json.dumps({"ts": "yesterday", "values": {"temp": 1}}), "invalid_timestamp"),
        (json.dumps({"ts": "2026-11-29T11:00:00", "values": {"temp": 1}}), "invalid_timestamp"),
        (json.dumps({"ts": 5, "values": {"temp": 1}}), "invalid_timestamp"),
        (b'{"values": {"temp": 1}}\xff\xfe', "invalid_encoding"),
        ("x" * (MAX_TELEMETRY_BYTES + 1), "payload_too_large"),
        ("{\x00}", "invalid_json"),
    ],
)
def test_malformed_payload_is_recorded_with_reason_and_dropped(payload, reason) -> None:
    kit = make_farm()
    result = telemetry_ingest(messages=[message(kit.sensor.serial_number, payload)])
    assert result.rejections == 1
    rejection = DeviceMessageRejection.objects.get()
    assert rejection.reason_code == reason
    assert rejection.serial_number == kit.sensor.serial_number
    assert Telemetry.objects.count() == 0
    assert AutomationEndpointEvent.objects.count() == 0


def test_unknown_device_is_recorded() -> None:
    telemetry_ingest(messages=[message("NOPE-1", telemetry(temp=1))])
    rejection = DeviceMessageRejection.objects.get()
    assert (rejection.serial_number, rejection.reason_code) == ("NOPE-1", "unknown_device")


def test_retired_device_is_recorded() -> None:
    kit = make_farm()
    kit.sensor.status = DeviceStatus.RETIRED
    kit.sensor.save()
    telemetry_ingest(messages=[message(kit.sensor.serial_number, telemetry(temp=1))])
    assert DeviceMessageRejection.objects.get().reason_code == "device_retired"
    assert Telemetry.objects.count() == 0


@pytest.mark.parametrize(
    ("key", "value"),
    [("temp", "hot"), ("temp", True), ("io1", 1), ("io1", "on"), ("mode", 3), ("fan", None)],
)
def test_value_of_wrong_type_is_recorded_and_the_rest_kept(key, value) -> None:
    kit = make_farm()
    serial = kit.actuator.serial_number if key != "temp" else kit.sensor.serial_number
    good = "fan" if key != "fan" else "io1"
    good_value = 10 if good == "fan" else False
    values = {key: value} if key == "temp" else {key: value, good: good_value}
    telemetry_ingest(messages=[message(serial, telemetry(**values))])
    rejection = DeviceMessageRejection.objects.get()
    assert rejection.reason_code == "invalid_value_type"
    assert key in rejection.detail
    endpoints = (kit.temp, kit.humidity, kit.io1, kit.fan, kit.mode)
    types = {(e.device_id, e.profile_endpoint.key): e.profile_endpoint.data_type for e in endpoints}
    since = NOW - timedelta(days=30)
    kept = device_readings(device_ids={d for d, _ in types}, types=types, start=since, end=NOW)
    assert [r.value for r in kept] == ([] if key == "temp" else [good_value])


def test_a_batch_mixes_good_and_bad_messages_without_losing_either() -> None:
    kit = make_farm()
    kit.rule()  # reads temp: one event per good message
    serial = kit.sensor.serial_number
    result = telemetry_ingest(
        messages=[
            message(serial, telemetry("2026-11-29T11:00:00Z", temp=1)),
            message("GHOST", telemetry(temp=2)),
            message(serial, "garbage"),
            message(serial, telemetry("2026-11-29T11:00:01Z", temp=3)),
        ]
    )
    assert result.telemetry == 2
    assert result.rejections == 2
    assert AutomationEndpointEvent.objects.count() == 2


def test_keys_without_an_endpoint_are_one_rejection_per_message_and_the_rest_kept() -> None:
    kit = make_farm()
    kit.rule()  # reads temp
    msg = message(kit.sensor.serial_number, telemetry(temp=31.5, co2=400, lux=3))
    result = telemetry_ingest(messages=[msg])
    assert (result.telemetry, result.events, result.rejections) == (1, 1, 1)
    rejection = DeviceMessageRejection.objects.get()
    assert (rejection.reason_code, rejection.kind) == ("unknown_endpoint", "telemetry")
    assert "co2" in rejection.detail and "lux" in rejection.detail
    assert "temp" not in rejection.detail
    assert list(AutomationEndpointEvent.objects.values_list("normalized_value", flat=True)) == [
        31.5
    ]
    telemetry_ingest(messages=[msg])  # a redelivery records nothing again
    assert DeviceMessageRejection.objects.count() == 1


def test_unknown_keys_cost_no_query_per_message() -> None:
    kit = make_farm()
    serial = kit.sensor.serial_number

    def batch(first: int, size: int) -> list[InboundTelemetry]:
        return [message(serial, telemetry(temp=n, co2=n)) for n in range(first, first + size)]

    endpoints_read()  # the configuration a running process holds already
    with CaptureQueriesContext(connection) as one:
        telemetry_ingest(messages=batch(0, 1))
    with CaptureQueriesContext(connection) as many:
        telemetry_ingest(messages=batch(1, 50))
    assert DeviceMessageRejection.objects.filter(reason_code="unknown_endpoint").count() == 51
    assert len(many) == len(one)


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_same_message_20_times_from_4_threads_yields_one_event_set_and_one_intent() -> None:
    kit = make_farm()
    kit.rule(threshold_value=30, target_value=True)
    msg = message(kit.sensor.serial_number, telemetry(temp=35, humidity=50))
    barrier = threading.Barrier(4)
    errors: list[BaseException] = []

    def deliver() -> None:
        try:
            barrier.wait()
            for _ in range(5):
                result = telemetry_ingest(messages=[msg])
                endpoint_events_evaluate(event_ids=result.pending_event_ids)
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=deliver) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert Telemetry.objects.count() == 1
    assert AutomationEndpointEvent.objects.count() == 1  # temp's: no rule reads humidity
    assert DeviceCommand.objects.count() == 1


def test_an_unstamped_message_is_one_reading_within_the_redelivery_window() -> None:
    """No ``ts``: a copy arriving 30 s later is a redelivery; the same words past
    ``TELEMETRY_UNSTAMPED_DEDUPE_S`` are a new reading, timed by their own arrival."""
    kit = make_farm()
    payload = json.dumps({"values": {"temp": 22.0}})
    first = NOW - timedelta(seconds=700)
    for seconds in (0, 30, 700):
        arrived = first + timedelta(seconds=seconds)
        telemetry_ingest(messages=[InboundTelemetry(kit.sensor.serial_number, payload, arrived)])
    stored = list(Telemetry.objects.order_by("message_ts").values_list("message_ts", flat=True))
    assert stored == [first, NOW]
