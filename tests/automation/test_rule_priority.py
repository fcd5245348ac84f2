"""Several rules on one endpoint: priority, then the newest reading; the losers end
discarded/lower_priority naming the winner. Rules with several conditions (each fresh) and
several actions (each its own command with its own gates)."""

from __future__ import annotations

import json
import threading
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from automation.models import (
    AutomationEndpointEvent,
    AutomationRuleAction,
    AutomationRuleCondition,
    AutomationRuleExecution,
    DeviceCommand,
)
from automation.services.evaluate import endpoint_events_evaluate
from automation.services.ingest import telemetry_ingest
from automation.states import CommandStatus, ExecutionOutcome, ReasonCode
from devices.mqtt.messages import InboundTelemetry
from tests.devices.factories import FarmKit, make_farm

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("clock_at_fixture_dates")]

NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)


def ingest(serial: str, ts: str = "2026-11-29T11:59:00Z", **values: object) -> list[int]:
    payload = json.dumps({"ts": ts, "values": values})
    return telemetry_ingest(messages=[InboundTelemetry(serial, payload, NOW)]).pending_event_ids


def evaluate(event_ids: list[int]) -> Any:
    return endpoint_events_evaluate(event_ids=event_ids)


def outcome_of(rule_id: int) -> tuple[str, str, int | None]:
    e = AutomationRuleExecution.objects.get(rule_id=rule_id)
    return e.outcome, e.failure_reason, e.won_by_id


def test_the_higher_priority_rule_wins_the_endpoint_and_the_other_names_it() -> None:
    kit = make_farm()
    cooling = kit.rule(operator="gt", threshold_value=30, target_value=True, priority=10)
    humid = kit.rule(
        trigger_endpoint=kit.humidity, operator="gt", threshold_value=80, target_value=False
    )
    evaluate(ingest(kit.sensor.serial_number, temp=31, humidity=90))
    winner = AutomationRuleExecution.objects.get(rule=cooling)
    assert winner.outcome == ExecutionOutcome.COMMAND_CREATED
    assert outcome_of(humid.pk) == ("discarded", ReasonCode.LOWER_PRIORITY, winner.pk)
    intent = DeviceCommand.objects.get()
    assert (intent.rule_id, intent.target_value) == (cooling.pk, True)


def test_equal_priorities_resolve_to_the_newest_reading() -> None:
    kit = make_farm()
    by_temp = kit.rule(operator="gt", threshold_value=30, target_value=True)
    by_humidity = kit.rule(
        trigger_endpoint=kit.humidity, operator="gt", threshold_value=80, target_value=False
    )
    ids = ingest(kit.sensor.serial_number, ts="2026-11-29T11:58:00Z", temp=31)
    ids += ingest(kit.sensor.serial_number, ts="2026-11-29T11:59:00Z", humidity=90)
    evaluate(ids)
    newest = AutomationRuleExecution.objects.get(rule=by_humidity)
    assert newest.outcome == ExecutionOutcome.COMMAND_CREATED
    assert outcome_of(by_temp.pk) == ("discarded", ReasonCode.LOWER_PRIORITY, newest.pk)
    assert DeviceCommand.objects.get().target_value is False


def test_a_lower_priority_rule_does_not_replace_a_higher_ones_live_command() -> None:
    kit = make_farm()
    high = kit.rule(operator="gt", threshold_value=30, target_value=True, priority=5)
    low = kit.rule(
        trigger_endpoint=kit.humidity, operator="gt", threshold_value=80, target_value=False
    )
    evaluate(ingest(kit.sensor.serial_number, temp=31))
    live = DeviceCommand.objects.get(rule=high)
    evaluate(ingest(kit.sensor.serial_number, ts="2026-11-29T11:59:30Z", humidity=90))
    assert outcome_of(low.pk) == ("discarded", ReasonCode.LOWER_PRIORITY, live.rule_execution_id)
    live.refresh_from_db()
    assert live.status == CommandStatus.PENDING_DISPATCH  # not superseded
    assert DeviceCommand.objects.count() == 1


def test_a_higher_priority_rule_replaces_a_lower_ones_unsent_command() -> None:
    kit = make_farm()
    low = kit.rule(operator="gt", threshold_value=30, target_value=True)
    high = kit.rule(
        trigger_endpoint=kit.humidity,
        operator="gt",
        threshold_value=80,
        target_value=False,
        priority=5,
    )
    evaluate(ingest(kit.sensor.serial_number, temp=31))
    evaluate(ingest(kit.sensor.serial_number, ts="2026-11-29T11:59:30Z", humidity=90))
    old = DeviceCommand.objects.get(rule=low)
    assert (old.status, old.status_reason) == (CommandStatus.EXPIRED, ReasonCode.SUPERSEDED)
    assert DeviceCommand.objects.get(rule=high).status == CommandStatus.PENDING_DISPATCH


def rule_with_humidity_condition(kit: FarmKit, window_s: int = 600) -> Any:
    rule = kit.rule(
        operator="gt", threshold_value=30, target_value=True, condition_window_s=window_s
    )
    AutomationRuleCondition.objects.create(
        rule=rule, endpoint=kit.humidity, operator="lt", threshold_value=60
    )
    return rule


def test_every_condition_must_hold_on_a_fresh_reading() -> None:
    kit = make_farm()
    rule = rule_with_humidity_condition(kit)
    evaluate(ingest(kit.sensor.serial_number, ts="2026-11-29T11:40:00Z", humidity=50))
    evaluate(ingest(kit.sensor.serial_number, ts="2026-11-29T11:59:00Z", temp=31))
    assert not AutomationRuleExecution.objects.filter(rule=rule).exists()  # humidity 19 min old
    evaluate(ingest(kit.sensor.serial_number, ts="2026-11-29T11:59:10Z", humidity=55))
    # The humidity reading makes the rule evaluate too, and the temperature is fresh now.
    assert AutomationRuleExecution.objects.get(rule=rule).outcome == "intent_created"


def test_a_message_with_the_trigger_and_a_condition_decides_the_rule_once() -> None:
    """Both readings evaluate the rule; one decision acts, the other names it and says it
    lost to the same rule's newer reading, not to a rule of higher priority."""
    kit = make_farm()
    rule = rule_with_humidity_condition(kit)
    evaluate(ingest(kit.sensor.serial_number, temp=31, humidity=50))
    executions = list(AutomationRuleExecution.objects.filter(rule=rule).order_by("pk"))
    assert len(executions) == 2
    (winner,) = [e for e in executions if e.outcome == ExecutionOutcome.COMMAND_CREATED]
    (other,) = [e for e in executions if e is not winner]
    assert (other.outcome, other.failure_reason, other.won_by_id) == (
        ExecutionOutcome.DISCARDED,
        ReasonCode.NEWER_READING,
        winner.pk,
    )
    assert DeviceCommand.objects.get().rule_execution_id == winner.pk


def test_a_failing_condition_keeps_the_rule_quiet() -> None:
    kit = make_farm()
    rule = rule_with_humidity_condition(kit)
    evaluate(ingest(kit.sensor.serial_number, temp=31, humidity=70))
    assert not AutomationRuleExecution.objects.filter(rule=rule).exists()
    assert not DeviceCommand.objects.exists()


def test_each_action_is_its_own_command_with_its_own_gates() -> None:
    kit = make_farm()
    rule = kit.rule(operator="gt", threshold_value=30, target_value=True)
    AutomationRuleAction.objects.create(rule=rule, target_endpoint=kit.fan, target_value=80)
    AutomationRuleAction.objects.create(rule=rule, target_endpoint=kit.mode, target_value="auto")
    kit.mode.is_enabled = False
    kit.mode.save(update_fields=["is_enabled"])
    evaluate(ingest(kit.sensor.serial_number, temp=31))
    outcomes = dict(
        AutomationRuleExecution.objects.filter(rule=rule).values_list(
            "target_endpoint_id", "outcome"
        )
    )
    assert outcomes == {
        kit.io1.pk: "intent_created",
        kit.fan.pk: "intent_created",
        kit.mode.pk: "blocked",
    }
    sent = dict(DeviceCommand.objects.values_list("target_device_endpoint_id", "target_value"))
    assert sent == {kit.io1.pk: True, kit.fan.pk: 80}
    assert len({i.idempotency_key for i in DeviceCommand.objects.all()}) == 2


def test_a_redelivered_batch_adds_nothing() -> None:
    kit = make_farm()
    rule = kit.rule(operator="gt", threshold_value=30, target_value=True, priority=1)
    AutomationRuleAction.objects.create(rule=rule, target_endpoint=kit.fan, target_value=80)
    kit.rule(trigger_endpoint=kit.humidity, operator="gt", threshold_value=80, target_value=False)
    ids = ingest(kit.sensor.serial_number, temp=31, humidity=90)
    evaluate(ids)
    # A redelivery racing the first run: the events read pending again.
    AutomationEndpointEvent.objects.filter(pk__in=ids).update(processing_status="pending")
    evaluate(ids)
    assert AutomationRuleExecution.objects.count() == 3
    assert DeviceCommand.objects.count() == 2


def test_queries_per_batch_do_not_grow_with_rules_conditions_and_actions() -> None:
    def queries(n: int) -> int:
        kits = [make_farm() for _ in range(n)]
        ids: list[int] = []
        for kit in kits:
            rule = rule_with_humidity_condition(kit)
            AutomationRuleAction.objects.create(rule=rule, target_endpoint=kit.fan, target_value=80)
            kit.rule(operator="gt", threshold_value=30, target_value=False, priority=-1)
            ids += ingest(kit.sensor.serial_number, temp=31, humidity=50)
        with CaptureQueriesContext(connection) as ctx:
            evaluate(ids)
        return len(ctx.captured_queries)

    assert queries(2) == queries(6)


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_concurrent_workers_on_one_endpoint_leave_one_winner() -> None:
    """Two workers decide for one relay at once, from two rules: whichever order the target
    lock gives them, the higher-priority rule's command is the one left to send."""
    for _ in range(5):  # several rounds: races are probabilistic
        kit = make_farm()
        high = kit.rule(operator="gt", threshold_value=30, target_value=True, priority=5)
        low = kit.rule(
            trigger_endpoint=kit.humidity, operator="gt", threshold_value=80, target_value=False
        )
        temp_ids = ingest(kit.sensor.serial_number, temp=31)
        humidity_ids = ingest(kit.sensor.serial_number, ts="2026-11-29T11:59:01Z", humidity=90)
        barrier = threading.Barrier(2)
        errors: list[BaseException] = []

        def work(
            ids: list[int],
            barrier: threading.Barrier = barrier,
            errors: list[BaseException] = errors,
        ) -> None:
            try:
                barrier.wait()
                evaluate(ids)
            except BaseException as exc:  # pragma: no cover - reported below
                errors.append(exc)
            finally:
                connection.close()

        threads = [threading.Thread(target=work, args=(i,)) for i in (temp_ids, humidity_ids)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        assert errors == []
        live = DeviceCommand.objects.filter(
            target_device_endpoint=kit.io1, status=CommandStatus.PENDING_DISPATCH
        )
        assert [(i.rule_id, i.target_value) for i in live] == [(high.pk, True)]
        assert AutomationRuleExecution.objects.filter(rule=low).count() == 1


def test_window_is_measured_from_the_triggering_reading() -> None:
    kit = make_farm()
    rule = rule_with_humidity_condition(kit, window_s=30)
    evaluate(ingest(kit.sensor.serial_number, ts="2026-11-29T11:58:00Z", humidity=50))
    evaluate(ingest(kit.sensor.serial_number, ts="2026-11-29T11:58:20Z", temp=31))
    assert AutomationRuleExecution.objects.filter(rule=rule).count() == 1
    later = (NOW - timedelta(seconds=5)).strftime("%Y-%m-%dT%H:%M:%SZ")
    evaluate(ingest(kit.sensor.serial_number, ts=later, temp=32))
    assert AutomationRuleExecution.objects.filter(rule=rule).count() == 1  # humidity too old
