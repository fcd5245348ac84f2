"""Who drives a relay that a schedule, a threshold rule and an operator all act on, on the real
pipeline (API, worker, beat, scheduler poll, broker, bridge, simulated device): an operator's
hold beats both rules, between the rules the higher priority wins, and at equal priority the
latest decision does (docs/architecture.md, "Precedence").

A rule's decision and a schedule's occurrence are separate batches, so the priority shows
while the first one's command is still on its way: the relay acks late (``delay_ack``)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from django.contrib.auth.models import User
from django.db.models import QuerySet
from django.utils import timezone

from automation.models import (
    AutomationRule,
    AutomationRuleExecution,
    AutomationRuleSchedule,
    DeviceCommand,
)
from automation.services.rule_schedules import rule_schedules_ensure
from automation.states import COMMAND_TERMINAL, CommandStatus
from common.models import MemberRole
from devtools.simulator import FaultMode
from tests.common.auth import token_client
from tests.common.factories import OrganizationMemberFactory
from tests.e2e.conftest import Pipeline, wait_final
from tests.waiting import wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

# The late ack keeps the first command live across the second decision (the occurrence comes
# 2-3 s after it was set); the ack timeout outlasts it, so nothing is retried meanwhile.
ACK_DELAY_S = 5.0
LEAD_S = 2  # an occurrence is set this many whole seconds (and a fraction) ahead


@pytest.fixture
def fast_timers(fast_timers: None, settings: Any) -> None:
    """The e2e timers, with the scheduler polled often enough for an occurrence to run
    within a fraction of a second of its time."""
    settings.SCHEDULER_POLL_INTERVAL_S = 0.2
    settings.ACK_TIMEOUT_S = ACK_DELAY_S + 3


def _intents(p: Pipeline) -> QuerySet[DeviceCommand]:
    return DeviceCommand.objects.filter(target_device=p.kit.actuator)


def _scheduled_rule(p: Pipeline, *, priority: int) -> AutomationRule:
    """ "At <time> set the relay on": no trigger endpoint, only schedules."""
    return AutomationRule.objects.create(
        farm=p.kit.farm,
        name="relay on by schedule",
        target_endpoint=p.kit.io1,
        target_value=True,
        priority=priority,
    )


def _threshold_rule(p: Pipeline, *, priority: int) -> AutomationRule:
    """ "Above 30 °C set the relay off"."""
    return p.kit.rule(
        name="relay off when hot",
        operator="gt",
        threshold_value=30,
        target_value=False,
        priority=priority,
    )


def _occur_soon(rule: AutomationRule) -> datetime:
    """A schedule at the next whole second past ``LEAD_S`` in the farm's zone, its row
    ensured now (as beat's ensure would); the occurrence's instant."""
    now = timezone.now()
    at = (now + timedelta(seconds=LEAD_S + 1)).replace(microsecond=0)
    local = at.astimezone(ZoneInfo(rule.farm.time_zone)).time().replace(tzinfo=None)
    AutomationRuleSchedule.objects.create(rule=rule, local_time=local, max_lateness_s=60)
    assert rule_schedules_ensure(rule_ids=[rule.pk], now=now) >= 1
    return at


def _execution(rule: AutomationRule, *, after: int = 0) -> AutomationRuleExecution:
    found: AutomationRuleExecution = wait_for(
        lambda: AutomationRuleExecution.objects.filter(rule=rule, pk__gt=after).first(),
        what=f"a decision of rule {rule.name!r}",
    )
    return found


def _sent(intent: DeviceCommand) -> Callable[[], bool]:
    """The command left the backend (claimed and published): a live command, not replaceable."""

    def check() -> bool:
        intent.refresh_from_db()
        return intent.attempt_count > 0 and intent.status != CommandStatus.PENDING_DISPATCH

    return check


def _first_command(p: Pipeline, rule: AutomationRule) -> DeviceCommand:
    """The rule's command, once it is on its way to the (late-acking) relay."""
    intent: DeviceCommand = wait_for(
        lambda: _intents(p).filter(rule=rule).first(), what=f"the command of {rule.name!r}"
    )
    wait_for(_sent(intent), what=f"the command of {rule.name!r} sent")
    assert intent.status not in COMMAND_TERMINAL, "acked before the second decision"
    return intent


def _schedule_then_reading(p: Pipeline, first: AutomationRule, second: AutomationRule) -> None:
    _occur_soon(first)
    _first_command(p, first)
    p.telemetry(temp=35)


def _reading_then_schedule(p: Pipeline, first: AutomationRule, second: AutomationRule) -> None:
    p.telemetry(temp=35)
    _first_command(p, first)
    _occur_soon(second)


@pytest.mark.parametrize(
    ("schedule_priority", "threshold_priority", "schedule_first", "winner"),
    [
        pytest.param(10, 0, True, "schedule", id="the-schedule-outranks-the-threshold-rule"),
        pytest.param(0, 10, False, "threshold", id="the-threshold-rule-outranks-the-schedule"),
        pytest.param(0, 0, False, "latest", id="equal-priorities-the-latest-decision-wins"),
    ],
)
def test_between_rules_the_higher_priority_wins_then_the_latest_decision(
    pipeline: Pipeline,
    schedule_priority: int,
    threshold_priority: int,
    schedule_first: bool,
    winner: str,
) -> None:
    pipeline.fault(FaultMode.DELAY_ACK, delay_s=ACK_DELAY_S)
    scheduled = _scheduled_rule(pipeline, priority=schedule_priority)
    threshold = _threshold_rule(pipeline, priority=threshold_priority)
    first, second = (scheduled, threshold) if schedule_first else (threshold, scheduled)
    stage = _schedule_then_reading if schedule_first else _reading_then_schedule
    stage(pipeline, first, second)

    first_decision, second_decision = _execution(first), _execution(second)
    pipeline.fault(FaultMode.NONE)  # both decided: a second command need not wait
    if winner == "latest":  # both command; the device ends with the newer one
        assert (first_decision.outcome, second_decision.outcome) == (
            "intent_created",
            "intent_created",
        )
        rows = wait_final(_intents(pipeline), count=2)
        assert [(i.rule_id, i.status) for i in rows] == [
            (first.pk, "applied"),
            (second.pk, "applied"),
        ]
        wanted = second.target_value
    else:  # the second, lower-priority decision yields to the live command of the first
        assert first.priority > second.priority
        assert (second_decision.outcome, second_decision.failure_reason) == (
            "discarded",
            "lower_priority",
        )
        assert second_decision.won_by_id == first_decision.pk
        (only,) = wait_final(_intents(pipeline))
        assert (only.rule_id, only.rule_execution_id, only.status) == (
            first.pk,
            first_decision.pk,
            "applied",
        )
        wanted = first.target_value
    origins = {i.rule_id: i.origin for i in _intents(pipeline)}
    assert origins.get(scheduled.pk, "schedule") == "schedule"
    assert origins.get(threshold.pk, "rule") == "rule"
    for intent in _intents(pipeline):
        assert pipeline.applies(intent.device_command_id) == 1
    assert pipeline.sim.values_of(pipeline.kit.actuator.serial_number)["io1"] is wanted


def test_a_manual_hold_beats_the_higher_priority_schedule_and_the_threshold_rule(
    pipeline: Pipeline,
) -> None:
    kit = pipeline.kit
    relay = kit.actuator.serial_number
    operator = User.objects.create_user(username=f"op-{relay}")
    OrganizationMemberFactory(
        user=operator, organization=kit.farm.organization, role=MemberRole.ADMIN
    )
    scheduled = _scheduled_rule(pipeline, priority=1000)
    threshold = _threshold_rule(pipeline, priority=-1000)

    _occur_soon(scheduled)
    (on,) = wait_final(_intents(pipeline))
    assert (on.origin, on.status) == ("schedule", "applied")
    assert pipeline.sim.values_of(relay)["io1"] is True

    sent = token_client(operator).post(
        f"/api/v1/endpoints/{kit.io1.pk}/command/",
        {"value": False, "reason": "pump maintenance"},
        format="json",
    )
    assert sent.status_code == 201, sent.content
    _, manual = wait_final(_intents(pipeline), count=2)
    assert (manual.origin, manual.status, manual.target_value) == ("manual", "applied", False)

    # During the hold: the hot reading and the next occurrence both decide, neither acts.
    first_occurrence = AutomationRuleExecution.objects.get(rule=scheduled).pk
    pipeline.telemetry(temp=35)
    _occur_soon(scheduled)
    for decision in (_execution(threshold), _execution(scheduled, after=first_occurrence)):
        assert (decision.outcome, decision.failure_reason, decision.suppressed_by_id) == (
            "suppressed",
            "manual_override",
            manual.pk,
        )
    assert _intents(pipeline).count() == 2
    assert [pipeline.applies(i.device_command_id) for i in (on, manual)] == [1, 1]
    assert pipeline.sim.values_of(relay)["io1"] is False
