"""A rollout among the endpoint's other deciders (docs/architecture.md, "Precedence"): an
operator's hold and a higher-priority rule's live command outrank it (the target is
skipped, naming why); its own live command outranks a lower-priority rule, whose decision
is discarded naming the rollout's command; between equal priorities the latest decision
wins, as for any two rules."""

from __future__ import annotations

import json

import pytest
from django.contrib.auth.models import User
from django.utils import timezone

from automation.models import AutomationRuleExecution, DeviceCommand
from automation.services.evaluate import endpoint_events_evaluate
from automation.services.ingest import telemetry_ingest
from automation.services.manual import endpoint_command_manual, endpoint_hold_cancel
from automation.states import CommandOrigin, CommandStatus, ExecutionOutcome, ReasonCode
from devices.mqtt.messages import InboundTelemetry
from rollouts.models import RolloutTarget
from rollouts.services.drive import rollout_tick
from rollouts.services.plan import RolloutSpec, rollout_create
from rollouts.states import SkipReason, TargetStep
from tests.automation.conftest import make_intent
from tests.devices.factories import FarmKit, make_farm

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("clock_at_fixture_dates")]


@pytest.fixture
def olga(db: None) -> User:
    return User.objects.create_user(username="olga", password="pw")


def _rollout_on_io1(kit: FarmKit, user: User, *, priority: int = 0, value: bool = False) -> int:
    spec = RolloutSpec(
        name="relays off",
        farm_ids=[kit.farm.pk],
        profile_id=kit.actuator.profile_id,
        endpoint_key="io1",
        value=value,
        reason="season end",
        priority=priority,
        canary_size=1,
    )
    rollout = rollout_create(organization=kit.farm.organization, actor=user, spec=spec)
    rollout_tick(rollout.pk, now=timezone.now())
    return rollout.pk


def _target(rollout_id: int, kit: FarmKit) -> RolloutTarget:
    return RolloutTarget.objects.get(rollout_id=rollout_id, endpoint=kit.io1)


def test_a_manual_hold_outranks_a_rollout_and_its_end_does_not_resend(olga: User) -> None:
    kit = make_farm()
    endpoint_command_manual(endpoint_id=kit.io1.pk, value=True, actor=olga, reason="harvest")
    rollout_id = _rollout_on_io1(kit, olga)
    target = _target(rollout_id, kit)
    assert (target.step, target.reason, target.command_id) == (
        TargetStep.SKIPPED,
        SkipReason.MANUAL_OVERRIDE,
        None,
    )
    endpoint_hold_cancel(endpoint_id=kit.io1.pk, actor=olga, reason="done")
    rollout_tick(rollout_id, now=timezone.now())
    assert not DeviceCommand.objects.filter(origin=CommandOrigin.ROLLOUT).exists()


def test_a_higher_priority_rules_live_command_outranks_a_rollout(olga: User) -> None:
    kit = make_farm()
    kit.rule(priority=5)
    rule_command = make_intent(kit)  # live, pending dispatch
    rollout_id = _rollout_on_io1(kit, olga, priority=4)
    target = _target(rollout_id, kit)
    assert (target.step, target.reason) == (TargetStep.SKIPPED, SkipReason.LOWER_PRIORITY)
    assert DeviceCommand.objects.get(pk=rule_command.pk).status == CommandStatus.PENDING_DISPATCH


def test_a_rollout_replaces_an_unsent_command_of_an_equal_priority_rule(olga: User) -> None:
    kit = make_farm()
    kit.rule(priority=0)
    rule_command = make_intent(kit)
    rollout_id = _rollout_on_io1(kit, olga, priority=0)
    target = _target(rollout_id, kit)
    assert target.step == TargetStep.SENT
    replaced = DeviceCommand.objects.get(pk=rule_command.pk)
    assert (replaced.status, replaced.status_reason) == (CommandStatus.EXPIRED, "superseded")


def test_a_live_rollout_command_outranks_a_lower_priority_rule(olga: User) -> None:
    kit = make_farm()
    kit.rule(priority=1)
    rollout_id = _rollout_on_io1(kit, olga, priority=10)
    command = _target(rollout_id, kit).command
    assert command is not None and command.status == CommandStatus.PENDING_DISPATCH
    _reading_over_threshold(kit)
    execution = AutomationRuleExecution.objects.get()
    assert (execution.outcome, execution.failure_reason) == (
        ExecutionOutcome.DISCARDED,
        ReasonCode.LOWER_PRIORITY,
    )
    assert execution.suppressed_by_id == command.pk and execution.won_by_id is None
    assert DeviceCommand.objects.get(pk=command.pk).status == CommandStatus.PENDING_DISPATCH


def _reading_over_threshold(kit: FarmKit) -> None:
    """A reading over the rule's threshold, evaluated (the decision may send nothing)."""
    payload = json.dumps({"ts": "2026-11-29T11:59:00Z", "values": {"temp": 31}})
    ids = telemetry_ingest(
        messages=[InboundTelemetry(kit.sensor.serial_number, payload, timezone.now())]
    ).pending_event_ids
    endpoint_events_evaluate(event_ids=ids)
