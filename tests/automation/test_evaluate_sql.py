"""Evaluation's rarer paths stay hand-written too (``automation.services.evaluate_sql``): a
decision that replaces an unsent command, one held by an operator's hold or by a cool-down,
and a redelivered event whose execution and command already exist. Each decides as before and
sends no statement through the ORM (``tests/automation/test_hot_path.py`` guards the common
path, a crossing on a free target)."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from django.contrib.auth.models import User
from django.utils import timezone

from automation.models import (
    AutomationEndpointEvent,
    AutomationRuleExecution,
    DeviceCommand,
    EndpointManualHold,
)
from automation.services.cooldown import command_cooldown_record
from automation.services.evaluate import EvaluateResult, endpoint_events_evaluate
from automation.services.ingest import telemetry_ingest
from automation.services.manual import endpoint_command_manual
from automation.services.rule_cache import rule_set
from automation.states import (
    CommandStatus,
    EventStatus,
    ExecutionOutcome,
    ReasonCode,
)
from common.hot_sql import statements_counted
from devices.mqtt.messages import InboundTelemetry
from tests.automation.factories import relay_command
from tests.automation.test_hot_path import orm_statements
from tests.devices.factories import FarmKit, make_farm

pytestmark = pytest.mark.django_db


def _reading(kit: FarmKit, temp: float, *, ago_s: float) -> list[int]:
    now = timezone.now()
    body = {"ts": (now - timedelta(seconds=ago_s)).isoformat(), "values": {"temp": temp}}
    message = InboundTelemetry(kit.sensor.serial_number, json.dumps(body), now)
    ids = telemetry_ingest(messages=[message]).pending_event_ids
    rule_set()  # a worker has the rules cached
    return ids


def _evaluated(ids: list[int]) -> EvaluateResult:
    with statements_counted() as count:
        result = endpoint_events_evaluate(event_ids=ids)
    assert count.hot, "evaluation ran no statement at all"
    assert orm_statements(count) == [], "evaluation went through the ORM"
    return result


@pytest.fixture
def kit() -> FarmKit:
    kit = make_farm()
    kit.rule(threshold_value=30, target_value=True)
    return kit


def test_a_newer_decision_replaces_the_unsent_command() -> None:
    kit = make_farm()
    kit.rule(operator="lt", threshold_value=20, target_value=False)
    kit.rule(threshold_value=30, target_value=True)
    first = _evaluated(_reading(kit, 10, ago_s=10)).pending_command_ids
    second = _evaluated(_reading(kit, 35, ago_s=5)).pending_command_ids
    assert len(first) == len(second) == 1
    replaced = DeviceCommand.objects.get(pk=first[0])
    assert (replaced.status, replaced.status_reason) == (
        CommandStatus.EXPIRED,
        ReasonCode.SUPERSEDED,
    )
    assert DeviceCommand.objects.get(pk=second[0]).target_value is True


def test_an_operators_hold_suppresses_the_rule_until_it_runs_out(kit: FarmKit) -> None:
    user = User.objects.create_user(username="olga", password="pw")
    manual = endpoint_command_manual(endpoint_id=kit.io1.pk, value=False, actor=user, reason="x")
    held = _evaluated(_reading(kit, 35, ago_s=10))
    assert held.pending_command_ids == []
    execution = AutomationRuleExecution.objects.get()
    assert (execution.outcome, execution.failure_reason) == (
        ExecutionOutcome.SUPPRESSED,
        ReasonCode.MANUAL_OVERRIDE,
    )
    assert execution.suppressed_by_id == manual.command.pk
    EndpointManualHold.objects.filter(endpoint=kit.io1).update(
        until=timezone.now() - timedelta(seconds=1)
    )
    assert len(_evaluated(_reading(kit, 36, ago_s=5)).pending_command_ids) == 1


def test_a_cooling_pair_is_suppressed(kit: FarmKit) -> None:
    now = timezone.now()
    failed = relay_command(
        kit, at=now, status=CommandStatus.FAILED, status_reason=ReasonCode.DEVICE_BUSY
    )
    cooling = command_cooldown_record(failed, now=now)
    result = _evaluated(_reading(kit, 35, ago_s=5))
    assert result.pending_command_ids == []
    execution = AutomationRuleExecution.objects.get()
    assert (execution.outcome, execution.failure_reason) == (
        ExecutionOutcome.SUPPRESSED,
        ReasonCode.COOLDOWN,
    )
    assert execution.suppressed_by_id == cooling.command_id


def test_a_redelivered_event_records_nothing_twice(kit: FarmKit) -> None:
    """The event's execution and command exist already (a worker that died after commit, a
    reset by hand): the inserts meet them, and the reads after the inserts name them."""
    ids = _reading(kit, 35, ago_s=5)
    (made,) = _evaluated(ids).pending_command_ids
    # The command ended meanwhile, so the repeated decision asks for it again.
    DeviceCommand.objects.filter(pk=made).update(status=CommandStatus.FAILED)
    AutomationEndpointEvent.objects.filter(pk__in=ids).update(processing_status=EventStatus.PENDING)
    again = _evaluated(ids)
    assert again.pending_command_ids == []
    assert AutomationRuleExecution.objects.count() == 1
    assert DeviceCommand.objects.count() == 1
    event = AutomationEndpointEvent.objects.get(pk=ids[0])
    assert event.processing_status == EventStatus.PROCESSED
