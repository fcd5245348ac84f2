"""A device that cannot obey gets no command storm: through the real bridge, workers and a
simulated relay, three hot waves of eight readings each ask for the same value."""

from __future__ import annotations

from typing import Any

import pytest

from automation.models import (
    AutomationEndpointEvent,
    AutomationRuleExecution,
    DeviceCommand,
)
from automation.states import COMMAND_TERMINAL
from devtools.simulator import FaultMode
from tests.e2e.conftest import Pipeline
from tests.waiting import wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

WAVES = 3
READINGS_PER_WAVE = 8


def _settled(p: Pipeline, readings: int) -> bool:
    events = AutomationEndpointEvent.objects.filter(device_instance_endpoint=p.kit.temp)
    if events.count() < readings or events.filter(processing_status="pending").exists():
        return False
    commands = DeviceCommand.objects.filter(target_device=p.kit.actuator)
    return not commands.exclude(status__in=COMMAND_TERMINAL).exists()


@pytest.mark.parametrize(
    ("fault", "options", "ends"),
    [
        (FaultMode.REJECT, {"reject_code": "invalid_param"}, "failed/invalid_param"),
        (FaultMode.WRONG_VALUE, {}, "uncertain/state_mismatch"),
        (FaultMode.NEVER_APPLY, {}, "uncertain/no_applied_evidence"),
    ],
)
def test_hot_waves_on_a_relay_that_cannot_obey_make_at_most_two_commands(
    pipeline: Pipeline, fault: FaultMode, options: dict[str, Any], ends: str
) -> None:
    pipeline.fault(fault, **options)
    pipeline.kit.rule(operator="gt", threshold_value=30, target_value=True)
    sent = 0
    for _wave in range(WAVES):
        for n in range(READINGS_PER_WAVE):
            pipeline.telemetry(temp=31 + n)
            sent += 1
        wait_for(
            lambda count=sent: _settled(pipeline, count),  # type: ignore[misc]
            what="the wave evaluated and its commands final",
        )
    commands = list(
        DeviceCommand.objects.filter(target_device=pipeline.kit.actuator).order_by("pk")
    )
    assert 1 <= len(commands) <= 2, [f"{c.status}/{c.status_reason}" for c in commands]
    assert f"{commands[0].status}/{commands[0].status_reason}" == ends
    serial = pipeline.kit.actuator.serial_number
    requested = {cid for (s, cid) in pipeline.sim.requests if s == serial}
    assert len(requested) == len(commands)  # what the relay received, not only what was decided
    # The other readings were held, and say why.
    outcomes = set(
        AutomationRuleExecution.objects.filter(rule__target_endpoint=pipeline.kit.io1).values_list(
            "outcome", flat=True
        )
    )
    assert "suppressed" in outcomes
