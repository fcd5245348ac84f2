"""Rule evaluation: matches make one execution and one intent; gates block with a reason."""

from __future__ import annotations

import json
import threading
from datetime import UTC, datetime, timedelta

import pytest
import time_machine
from django.db import connection, transaction

from automation.models import (
    AutomationEndpointEvent,
    AutomationRuleExecution,
    DeviceCommand,
)
from automation.services.evaluate import endpoint_events_evaluate, events_evaluate
from automation.services.ingest import telemetry_ingest
from automation.states import CommandStatus
from automation.tasks import endpoint_events_sweep_task
from config.celery import app as celery_app
from config.task_names import COMMANDS_DISPATCH
from devices.models import DeviceStatus, Farm
from devices.mqtt.messages import InboundTelemetry
from tests.devices.factories import FarmFactory, make_farm

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("clock_at_fixture_dates")]

NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)


def ingest(serial: str, ts: str = "2026-11-29T11:59:00Z", **values: object) -> list[int]:
    payload = json.dumps({"ts": ts, "values": values})
    return telemetry_ingest(messages=[InboundTelemetry(serial, payload, NOW)]).pending_event_ids


def evaluate(event_ids: list[int]) -> None:
    endpoint_events_evaluate(event_ids=event_ids)


def test_matching_rule_creates_execution_and_intent_with_binding() -> None:
    kit = make_farm()
    rule = kit.rule(operator="gt", threshold_value=30, target_value=True)
    evaluate(ingest(kit.sensor.serial_number, temp=31))
    execution = AutomationRuleExecution.objects.get()
    assert (execution.rule_id, execution.outcome) == (rule.pk, "intent_created")
    intent = DeviceCommand.objects.get()
    assert intent.rule_execution_id == execution.pk
    assert intent.status == CommandStatus.PENDING_DISPATCH
    assert (intent.command_method, intent.command_params) == ("setIO", {"io1": True})
    assert intent.target_serial_number == kit.actuator.serial_number
    assert intent.device_command_id is None  # assigned once, by the dispatcher
    event = AutomationEndpointEvent.objects.get(device_instance_endpoint=kit.temp)
    assert (event.processing_status, event.status_reason) == ("processed", "rule_matched")


def test_non_matching_event_is_discarded_with_reason() -> None:
    kit = make_farm()
    kit.rule(operator="gt", threshold_value=30)
    evaluate(ingest(kit.sensor.serial_number, temp=20))
    event = AutomationEndpointEvent.objects.get()
    assert (event.processing_status, event.status_reason) == ("discarded", "no_matching_rule")
    assert not AutomationRuleExecution.objects.exists()


def test_evaluating_twice_yields_one_execution_and_one_intent() -> None:
    kit = make_farm()
    kit.rule()
    ids = ingest(kit.sensor.serial_number, temp=31)
    evaluate(ids)
    AutomationEndpointEvent.objects.update(processing_status="pending")  # a replayed event
    evaluate(ids)
    evaluate(ids)
    assert AutomationRuleExecution.objects.count() == 1
    assert DeviceCommand.objects.count() == 1


def test_inactive_rule_and_rule_of_other_farm_do_not_fire() -> None:
    kit = make_farm()
    kit.rule(is_active=False)
    other = FarmFactory(organization=kit.farm.organization)
    kit.rule(farm=other)  # trigger endpoint belongs to another farm's device
    evaluate(ingest(kit.sensor.serial_number, temp=31))
    assert not DeviceCommand.objects.exists()


def _blocked_reason() -> str:
    execution = AutomationRuleExecution.objects.get()
    assert execution.outcome == "blocked"
    assert not DeviceCommand.objects.exists()
    return execution.failure_reason


def test_gate_target_disabled() -> None:
    kit = make_farm()
    kit.io1.is_enabled = False
    kit.io1.save()
    kit.rule()
    evaluate(ingest(kit.sensor.serial_number, temp=31))
    assert _blocked_reason() == "target_disabled"


def test_gate_target_not_writable() -> None:
    kit = make_farm()
    kit.rule(target_endpoint=kit.humidity, target_value=5)
    evaluate(ingest(kit.sensor.serial_number, temp=31))
    assert _blocked_reason() == "target_not_writable"


def test_gate_target_in_other_farm() -> None:
    kit = make_farm()
    elsewhere = make_farm(farm=FarmFactory(organization=kit.farm.organization))
    kit.rule(target_endpoint=elsewhere.io1)
    evaluate(ingest(kit.sensor.serial_number, temp=31))
    assert _blocked_reason() == "target_other_farm"


@pytest.mark.parametrize(
    ("status", "reason"),
    [(DeviceStatus.MAINTENANCE, "target_maintenance"), (DeviceStatus.RETIRED, "target_retired")],
)
def test_gate_target_device_status(status, reason) -> None:
    kit = make_farm()
    kit.actuator.status = status
    kit.actuator.save()
    kit.rule()
    evaluate(ingest(kit.sensor.serial_number, temp=31))
    assert _blocked_reason() == reason


@pytest.mark.parametrize(
    ("target", "value", "reason"),
    [
        ("fan", 101, "value_out_of_range"),
        ("fan", -1, "value_out_of_range"),
        ("fan", "fast", "value_wrong_type"),
        ("io1", 1, "value_wrong_type"),
        ("mode", "turbo", "value_not_allowed"),
    ],
)
def test_gate_value_within_constraints(target, value, reason) -> None:
    kit = make_farm()
    kit.rule(target_endpoint=getattr(kit, target), target_value=value)
    evaluate(ingest(kit.sensor.serial_number, temp=31))
    assert _blocked_reason() == reason


def test_gate_binding_invalid() -> None:
    kit = make_farm()
    kit.io1.profile_endpoint.rpc_method = ""
    kit.io1.profile_endpoint.save()
    kit.rule()
    evaluate(ingest(kit.sensor.serial_number, temp=31))
    assert _blocked_reason() == "binding_invalid"


def test_target_already_in_state_creates_no_intent() -> None:
    kit = make_farm()
    kit.rule(target_value=True)
    evaluate(ingest(kit.actuator.serial_number, io1=True))
    evaluate(ingest(kit.sensor.serial_number, temp=31))
    execution = AutomationRuleExecution.objects.get()
    assert execution.outcome == "already_in_state"
    assert not DeviceCommand.objects.exists()


def test_repeated_telemetry_while_a_command_is_live_makes_no_storm() -> None:
    kit = make_farm()
    kit.rule(target_value=True)
    for second in range(5):
        evaluate(ingest(kit.sensor.serial_number, ts=f"2026-11-29T11:59:0{second}Z", temp=31))
    outcomes = list(AutomationRuleExecution.objects.values_list("outcome", flat=True))
    assert outcomes.count("intent_created") == 1
    assert outcomes.count("already_pending") == 4
    assert DeviceCommand.objects.count() == 1


def test_different_value_while_a_command_is_live_is_queued_behind_it() -> None:
    kit = make_farm()
    kit.rule(operator="gt", threshold_value=30, target_value=True)
    kit.rule(operator="lt", threshold_value=10, target_value=False)
    evaluate(ingest(kit.sensor.serial_number, ts="2026-11-29T11:59:00Z", temp=31))
    evaluate(ingest(kit.sensor.serial_number, ts="2026-11-29T11:59:01Z", temp=5))
    values = list(DeviceCommand.objects.order_by("pk").values_list("target_value", flat=True))
    assert values == [True, False]


def _statuses() -> list[tuple[object, str, str]]:
    rows = DeviceCommand.objects.order_by("pk")
    return list(rows.values_list("target_value", "status", "status_reason"))


def test_a_new_decision_supersedes_a_command_never_sent() -> None:
    kit = make_farm()
    kit.rule(operator="gt", threshold_value=30, target_value=True)
    kit.rule(operator="lt", threshold_value=10, target_value=False)
    evaluate(ingest(kit.sensor.serial_number, ts="2026-11-29T11:59:00Z", temp=31))
    evaluate(ingest(kit.sensor.serial_number, ts="2026-11-29T11:59:01Z", temp=5))
    assert _statuses() == [
        (True, "expired", "superseded"),
        (False, "pending_dispatch", ""),
    ]
    old = DeviceCommand.objects.order_by("pk").first()
    assert old is not None and old.device_command_id is None  # it never reached the device
    assert old.transitions.get().to_status == "expired"


def test_a_sent_command_is_not_superseded_and_the_device_ends_with_the_newest() -> None:
    kit = make_farm()
    kit.rule(operator="gt", threshold_value=30, target_value=True)
    kit.rule(operator="lt", threshold_value=10, target_value=False)
    evaluate(ingest(kit.sensor.serial_number, ts="2026-11-29T11:59:00Z", temp=31))
    DeviceCommand.objects.update(attempt_count=1, status="dispatched")  # on its way
    evaluate(ingest(kit.sensor.serial_number, ts="2026-11-29T11:59:01Z", temp=5))
    # Hot again: True is live (sent) but False is queued behind it, so True must be asked
    # for once more, and the queued False is replaced.
    evaluate(ingest(kit.sensor.serial_number, ts="2026-11-29T11:59:02Z", temp=33))
    assert _statuses() == [
        (True, "dispatched", ""),
        (False, "expired", "superseded"),
        (True, "pending_dispatch", ""),
    ]


def test_an_older_reading_evaluated_late_sends_nothing() -> None:
    kit = make_farm()
    kit.rule(operator="gt", threshold_value=30, target_value=True)
    kit.rule(operator="lt", threshold_value=10, target_value=False)
    late = ingest(kit.sensor.serial_number, ts="2026-11-29T11:59:00Z", temp=31)
    evaluate(ingest(kit.sensor.serial_number, ts="2026-11-29T11:59:01Z", temp=5))
    evaluate(late)  # redelivered after the newer reading was ingested (and decided)
    assert _statuses() == [(False, "pending_dispatch", "")]
    event = AutomationEndpointEvent.objects.get(pk=late[0])
    assert (event.processing_status, event.status_reason) == ("discarded", "newer_reading")


def test_a_batch_with_several_readings_of_one_sensor_acts_on_the_newest() -> None:
    kit = make_farm()
    kit.rule(operator="gt", threshold_value=30, target_value=True)
    kit.rule(operator="lt", threshold_value=10, target_value=False)
    ids = [
        *ingest(kit.sensor.serial_number, ts="2026-11-29T11:59:02Z", temp=5),
        *ingest(kit.sensor.serial_number, ts="2026-11-29T11:59:00Z", temp=31),
        *ingest(kit.sensor.serial_number, ts="2026-11-29T11:59:01Z", temp=32),
    ]
    evaluate(ids)  # a backlog after an outage: no replay of history, the latest decides
    assert _statuses() == [(False, "pending_dispatch", "")]


def test_intent_ids_are_handed_to_dispatch_only_after_commit(
    django_capture_on_commit_callbacks, monkeypatch
) -> None:
    """The evaluate task hands its new commands on (``automation.services.spine``) once
    the transaction it runs in commits: a dispatcher never reads an uncommitted command."""
    kit = make_farm()
    kit.rule()
    ids = ingest(kit.sensor.serial_number, temp=31)
    handed: list[tuple[str, list[int]]] = []
    monkeypatch.setattr(
        "automation.services.spine.enqueue", lambda name, ids, **_: handed.append((name, ids))
    )
    with django_capture_on_commit_callbacks(execute=False) as callbacks, transaction.atomic():
        events_evaluate(event_ids=ids)
    assert handed == []
    for callback in callbacks:
        callback()
    assert handed == [(COMMANDS_DISPATCH, [DeviceCommand.objects.get().pk])]


def test_pending_event_whose_message_was_lost_is_evaluated_by_the_sweep(settings) -> None:
    kit = make_farm()
    kit.rule()
    settings.EVENT_SWEEP_AFTER_S = 30
    with time_machine.travel(NOW, tick=False):
        ingest(kit.sensor.serial_number, temp=31)  # the evaluate message is never sent
    celery_app.conf.task_always_eager = True
    try:
        with time_machine.travel(NOW + timedelta(seconds=10), tick=False):
            assert endpoint_events_sweep_task() == 0  # too young: the nudge may still come
        with time_machine.travel(NOW + timedelta(seconds=31), tick=False):
            assert endpoint_events_sweep_task() == 1
    finally:
        celery_app.conf.task_always_eager = False
    assert AutomationEndpointEvent.objects.get().processing_status == "processed"
    assert DeviceCommand.objects.count() == 1


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_one_event_evaluated_by_4_concurrent_workers_yields_one_intent() -> None:
    for _ in range(10):  # several rounds: races are probabilistic
        kit = make_farm(farm=FarmFactory())
        kit.rule()
        ids = ingest(kit.sensor.serial_number, temp=31)
        barrier = threading.Barrier(4)
        errors: list[BaseException] = []

        def work(
            event_ids: list[int] = ids,
            barrier: threading.Barrier = barrier,
            errors: list[BaseException] = errors,
        ) -> None:
            try:
                barrier.wait()
                evaluate(event_ids)
            except BaseException as exc:  # pragma: no cover - reported below
                errors.append(exc)
            finally:
                connection.close()

        threads = [threading.Thread(target=work) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert errors == []
        farm_filter = {"rule__farm": kit.farm}
        assert AutomationRuleExecution.objects.filter(**farm_filter).count() == 1
        assert DeviceCommand.objects.filter(**farm_filter).count() == 1
    assert Farm.objects.count() == 10
