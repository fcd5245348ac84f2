"""Dispatcher and reconciliation services on the database, publishing to a real broker."""

from __future__ import annotations

import json
import queue
import threading
from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest
from django.core.cache import cache
from django.db import connection
from django.utils import timezone

from automation.models import (
    DeviceCommand,
    DeviceCommandReceipt,
)
from automation.services.dispatch import command_dispatch, commands_due
from automation.services.evaluate import endpoint_events_evaluate
from automation.services.ingest import telemetry_ingest
from automation.services.receipts import DeviceMessage, device_messages_record
from automation.services.reconcile import command_reconcile
from devices.models import DeviceMessageRejection, Telemetry
from devices.mqtt.messages import InboundTelemetry
from devices.mqtt.publisher import PubackTimeout, Publisher, PublishError
from tests.devices.factories import FarmKit, make_farm
from tests.mqtt_fixtures import free_port

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("clock_at_fixture_dates")]


@pytest.fixture
def requests(mqtt_client_factory: Any) -> queue.Queue[tuple[str, dict[str, Any]]]:
    """RPC requests as a device would receive them."""
    received: queue.Queue[tuple[str, dict[str, Any]]] = queue.Queue()

    def on_message(_c: Any, _u: Any, msg: Any) -> None:
        received.put((msg.topic, json.loads(msg.payload)))

    mqtt_client_factory(subscribe=["devices/+/rpc/request"], on_message=on_message)
    return received


def _intent(kit: FarmKit, temp: float = 31, ts: str = "2026-11-29T11:59:00Z") -> Any:
    payload = json.dumps({"ts": ts, "values": {"temp": temp}})
    ids = telemetry_ingest(
        messages=[InboundTelemetry(kit.sensor.serial_number, payload, timezone.now())]
    ).pending_event_ids
    result = endpoint_events_evaluate(event_ids=ids)
    return DeviceCommand.objects.get(pk=result.pending_command_ids[0])


def _next(q: queue.Queue[Any], timeout: float = 5.0) -> Any:
    return q.get(timeout=timeout)


def _message(serial: str, kind: str, body: dict[str, Any]) -> DeviceMessage:
    return DeviceMessage(serial, kind, json.dumps(body), timezone.now())


def _ack(intent: Any, status: str = "accepted", code: str = "ok") -> DeviceMessage:
    return _message(
        intent.target_serial_number,
        "rpc_response",
        {
            "commandId": intent.device_command_id,
            "status": status,
            "resultCode": code,
            "message": None,
        },
    )


def _state(intent: Any, value: Any, serial: str | None = None) -> DeviceMessage:
    return _message(
        serial or intent.target_serial_number,
        "state",
        {
            "commandId": intent.device_command_id,
            "reportedState": {"io1": value},
            "appliedAt": "2026-11-29T12:00:00Z",
        },
    )


def _record_and_reconcile(*messages: DeviceMessage) -> list[int]:
    ids = device_messages_record(messages=list(messages))
    for pk in ids:
        command_reconcile(command_id=pk)
    return ids


def test_dispatch_publishes_the_contract_request_and_marks_dispatched(publisher, requests):
    kit = make_farm()
    kit.rule()
    intent = _intent(kit)
    assert command_dispatch(command_id=intent.pk, publish=publisher.publish) == "dispatched"
    topic, body = _next(requests)
    intent.refresh_from_db()
    assert topic == f"devices/{kit.actuator.serial_number}/rpc/request"
    assert body["commandId"] == intent.device_command_id
    assert body["commandId"].startswith("cmd_")
    assert (body["method"], body["params"]) == ("setIO", {"io1": True})
    assert body["sentAt"].endswith("Z") and body["deadlineAt"] > body["sentAt"]
    assert (intent.status, intent.attempt_count, intent.inflight_endpoint_id) == (
        "dispatched",
        1,
        kit.io1.pk,
    )
    assert intent.mqtt_request_id


def test_retry_reuses_the_command_id(publisher, requests, settings):
    settings.ACK_TIMEOUT_S = 0.01
    kit = make_farm()
    kit.rule()
    intent = _intent(kit)
    command_dispatch(command_id=intent.pk, publish=publisher.publish)
    first = _next(requests)[1]["commandId"]
    later = timezone.now() + timedelta(seconds=1)
    assert command_reconcile(command_id=intent.pk, now=later) == "retrying"
    intent.refresh_from_db()
    retry_at = intent.next_attempt_at + timedelta(milliseconds=1)
    assert (
        command_dispatch(command_id=intent.pk, publish=publisher.publish, now=retry_at)
        == "dispatched"
    )
    assert _next(requests)[1]["commandId"] == first
    intent.refresh_from_db()
    assert intent.attempt_count == 2
    kinds = list(intent.receipts.values_list("receipt_type", flat=True))
    assert sorted(kinds) == ["retry_mark", "timeout_mark"]


def test_three_timeouts_expire_the_command(publisher, requests, settings):
    settings.ACK_TIMEOUT_S = 0.01
    settings.DEVICE_FRESHNESS_S = 3600
    kit = make_farm()
    kit.rule()
    intent = _intent(kit)
    now = timezone.now()
    for _ in range(3):
        assert (
            command_dispatch(command_id=intent.pk, publish=publisher.publish, now=now)
            == "dispatched"
        )
        now += timedelta(seconds=1)
        command_reconcile(command_id=intent.pk, now=now)
        now += timedelta(seconds=120)
    intent.refresh_from_db()
    assert (intent.status, intent.status_reason, intent.attempt_count) == (
        "expired",
        "retry_budget_exhausted",
        3,
    )
    assert intent.inflight_endpoint_id is None
    ids = {_next(requests)[1]["commandId"] for _ in range(3)}
    assert ids == {intent.device_command_id}


def test_dispatch_rechecks_the_gates(publisher, requests):
    kit = make_farm()
    rule = kit.rule()
    intent = _intent(kit)
    rule.is_active = False
    rule.save()
    assert command_dispatch(command_id=intent.pk, publish=publisher.publish) == "gate_failed"
    intent.refresh_from_db()
    assert (intent.status, intent.status_reason) == ("failed", "rule_inactive")
    assert intent.inflight_endpoint_id is None
    assert requests.empty()


def test_offline_target_is_a_transient_retry(publisher, requests, settings):
    kit = make_farm()
    kit.rule()
    intent = _intent(kit)
    kit.actuator.last_seen_at = timezone.now() - timedelta(hours=1)
    kit.actuator.save()
    outcome = command_dispatch(command_id=intent.pk, publish=publisher.publish)
    assert outcome == "retry_scheduled"
    intent.refresh_from_db()
    assert (intent.status, intent.status_reason) == ("retrying", "target_offline")


def test_unconfirmed_publish_is_transient_then_expires(settings):
    """A broker that takes the request but never confirms it spends attempts (an unreachable
    one does not: tests/automation/test_dispatch_broker_outage.py)."""
    settings.DEVICE_FRESHNESS_S = 3600
    kit = make_farm()
    kit.rule()
    intent = _intent(kit)

    def stalled(topic: str, payload: bytes) -> int:
        raise PubackTimeout(f"no PUBACK for {topic} (mid 1) within 5.0s")

    now = timezone.now()
    outcomes = []
    for _ in range(3):
        outcomes.append(command_dispatch(command_id=intent.pk, publish=stalled, now=now))
        now += timedelta(minutes=5)
    intent.refresh_from_db()
    assert outcomes == ["retry_scheduled", "retry_scheduled", "expired"]
    assert (intent.status, intent.status_reason) == ("expired", "retry_budget_exhausted")
    assert "no PUBACK" in intent.last_error


def test_second_command_on_an_endpoint_waits_for_the_first(
    publisher, requests, django_capture_on_commit_callbacks
):
    kit = make_farm()
    kit.rule(operator="gt", threshold_value=30, target_value=True)
    kit.rule(operator="lt", threshold_value=20, target_value=False, name="cool down")

    def reading(ts: str, temp: int) -> DeviceCommand:
        payload = json.dumps({"ts": ts, "values": {"temp": temp}})
        ids = telemetry_ingest(
            messages=[InboundTelemetry(kit.sensor.serial_number, payload, timezone.now())]
        ).pending_event_ids
        [pk] = endpoint_events_evaluate(event_ids=ids).pending_command_ids
        return DeviceCommand.objects.get(pk=pk)

    first = reading("2026-11-29T11:59:00Z", 35)
    assert command_dispatch(command_id=first.pk, publish=publisher.publish) == "dispatched"
    second = reading("2026-11-29T11:59:30Z", 15)  # sent already: the first is not superseded
    for trust_cache in (True, False):
        assert (
            command_dispatch(
                command_id=second.pk, publish=publisher.publish, trust_cache=trust_cache
            )
            == "endpoint_busy"
        )
    first.refresh_from_db()
    with django_capture_on_commit_callbacks(execute=True):  # frees the endpoint's marker
        _record_and_reconcile(_ack(first), _state(first, True))
    first.refresh_from_db()
    assert first.status == "applied"
    assert command_dispatch(command_id=second.pk, publish=publisher.publish) == "dispatched"


def test_ack_then_state_reaches_applied_with_the_receipt_chain(publisher, requests):
    kit = make_farm()
    kit.rule()
    intent = _intent(kit)
    command_dispatch(command_id=intent.pk, publish=publisher.publish)
    intent.refresh_from_db()
    _record_and_reconcile(_ack(intent))
    intent.refresh_from_db()
    assert intent.status == "acknowledged"
    _record_and_reconcile(_state(intent, True))
    intent.refresh_from_db()
    assert intent.status == "applied" and intent.applied_at is not None
    chain = list(intent.transitions.order_by("at", "pk").values_list("to_status", flat=True))
    assert chain == ["dispatched", "acknowledged", "applied"]
    receipts = list(intent.receipts.order_by("pk").values_list("receipt_type", flat=True))
    assert receipts == ["rpc_ack", "state_report"]


def test_duplicate_ack_and_state_are_absorbed(publisher, requests):
    kit = make_farm()
    kit.rule()
    intent = _intent(kit)
    command_dispatch(command_id=intent.pk, publish=publisher.publish)
    intent.refresh_from_db()
    ack, state = _ack(intent), _state(intent, True)
    _record_and_reconcile(ack, ack, state)
    assert _record_and_reconcile(ack, state, state) == []
    intent.refresh_from_db()
    assert intent.status == "applied"
    assert intent.receipts.count() == 2
    assert intent.transitions.filter(to_status="applied").count() == 1


def test_wrong_reported_value_is_not_applied(publisher, requests):
    kit = make_farm()
    kit.rule()
    intent = _intent(kit)
    command_dispatch(command_id=intent.pk, publish=publisher.publish)
    intent.refresh_from_db()
    _record_and_reconcile(_ack(intent), _state(intent, False))
    intent.refresh_from_db()
    assert (intent.status, intent.status_reason) == ("uncertain", "state_mismatch")


def test_response_on_another_devices_topic_moves_nothing(publisher, requests):
    kit = make_farm()
    kit.rule()
    intent = _intent(kit)
    command_dispatch(command_id=intent.pk, publish=publisher.publish)
    intent.refresh_from_db()
    assert _record_and_reconcile(_state(intent, True, serial=kit.sensor.serial_number)) == []
    intent.refresh_from_db()
    assert intent.status == "dispatched"
    receipt = DeviceCommandReceipt.objects.get()
    assert receipt.mismatch and receipt.serial_number == kit.sensor.serial_number


def test_telemetry_equal_to_target_after_dispatch_applies(publisher, requests):
    kit = make_farm()
    kit.rule()
    intent = _intent(kit)
    command_dispatch(command_id=intent.pk, publish=publisher.publish)
    payload = json.dumps({"ts": "2026-11-29T12:00:01Z", "values": {"io1": True}})
    telemetry_ingest(
        messages=[InboundTelemetry(kit.actuator.serial_number, payload, timezone.now())]
    )
    assert Telemetry.objects.filter(device=kit.actuator).exists()  # no rule reads io1: no event
    assert command_reconcile(command_id=intent.pk) == "applied"
    intent.refresh_from_db()
    assert intent.status_reason == "telemetry_matched"


@pytest.mark.parametrize(
    ("payload", "kind", "reason"),
    [
        ("nope", "rpc_response", "invalid_json"),
        ('{"commandId": "cmd_X"}', "rpc_response", "missing_field"),
        (
            '{"commandId": "cmd_X", "status": "accepted", "resultCode": "busy"}',
            "rpc_response",
            "invalid_field",
        ),
        (
            '{"commandId": "cmd_X", "reportedState": 1, "appliedAt": "2026-01-01T00:00:00Z"}',
            "state",
            "invalid_field",
        ),
        (
            '{"commandId": "cmd_UNKNOWN", "status": "accepted", "resultCode": "ok"}',
            "rpc_response",
            "unknown_command",
        ),
    ],
)
def test_malformed_or_unknown_device_messages_are_recorded(payload, kind, reason):
    assert (
        device_messages_record(messages=[DeviceMessage("SN-1", kind, payload, timezone.now())])
        == []
    )
    rejection = DeviceMessageRejection.objects.get()
    assert (rejection.kind, rejection.reason_code) == (kind, reason)


def test_flushed_cache_mid_flow_changes_nothing(publisher, requests):
    kit = make_farm()
    kit.rule()
    intent = _intent(kit)
    command_dispatch(command_id=intent.pk, publish=publisher.publish)
    intent.refresh_from_db()
    cache.clear()  # correlation and inflight markers gone: the database decides
    _record_and_reconcile(_ack(intent), _state(intent, True))
    intent.refresh_from_db()
    assert intent.status == "applied"
    assert _next(requests)[1]["commandId"] == intent.device_command_id
    assert requests.empty()


def test_sweep_finds_lost_pending_and_due_retries_only(settings):
    kit = make_farm()
    kit.rule()
    intent = _intent(kit)
    now = timezone.now()
    assert commands_due(now=now, pending_older_than=now - timedelta(seconds=10), limit=10) == []
    later = now + timedelta(seconds=11)
    assert commands_due(now=later, pending_older_than=later - timedelta(seconds=10), limit=10) == [
        intent.pk
    ]


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_one_intent_dispatched_by_4_workers_is_published_once(publisher, requests):
    kit = make_farm()
    kit.rule()
    intent = _intent(kit)
    barrier = threading.Barrier(4)
    outcomes: list[str] = []

    def work() -> None:
        try:
            barrier.wait()
            outcomes.append(command_dispatch(command_id=intent.pk, publish=publisher.publish))
        finally:
            connection.close()

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert outcomes.count("dispatched") == 1
    _next(requests)
    with pytest.raises(queue.Empty):
        requests.get(timeout=0.5)
    intent.refresh_from_db()
    assert intent.attempt_count == 1


def test_unreachable_broker_raises_publish_error(mqtt_config):
    dead = Publisher(config=replace(mqtt_config, port=free_port()))
    with pytest.raises(PublishError):
        dead.publish("devices/x/rpc/request", b"{}", timeout_s=0.2)
