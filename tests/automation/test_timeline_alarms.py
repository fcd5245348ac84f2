"""A command's timeline shows the alarm it raised and each move of that alarm, who and why:
support reading why a person was woken finds it beside the command's own steps."""

from __future__ import annotations

import pytest
from django.utils import timezone

from alarms.models import Alarm
from alarms.services import alarm_acknowledge
from automation.diagnostics.timelines import command_timeline
from automation.services.transitions import GuardedTransition, Transition, guarded_transitions_apply
from automation.states import CommandStatus, ReasonCode
from tests.automation.conftest import make_intent
from tests.devices.factories import make_farm

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("clock_at_fixture_dates")]


def test_a_failed_commands_timeline_shows_its_alarm_raised_and_acknowledged() -> None:
    kit = make_farm()
    kit.rule(target_value=True)
    command = make_intent(kit)
    moves = [
        GuardedTransition(command, [Transition(CommandStatus.FAILED, ReasonCode.TARGET_DISABLED)])
    ]
    guarded_transitions_apply(moves, now=timezone.now())
    alarm = Alarm.objects.get()
    assert alarm_acknowledge(
        alarm_id=alarm.pk, actor="olga", comment="relay swapped", now=timezone.now()
    )
    entries = [e for e in command_timeline(command=command).entries if e.stage == "alarm"]
    assert [e.what for e in entries] == [
        "major command_failed alarm raised -> active",
        "major command_failed alarm active -> acknowledged",
    ]
    assert entries[-1].detail == "by olga: relay swapped"
    assert {e.ref for e in entries} == {f"alarm:{alarm.pk}"}
    stages = [e.stage for e in command_timeline(command=command).entries]
    assert stages.index("alarm") > stages.index("transition")


def test_a_command_that_raised_nothing_has_no_alarm_step() -> None:
    kit = make_farm()
    kit.rule(target_value=True)
    command = make_intent(kit)
    assert not [e for e in command_timeline(command=command).entries if e.stage == "alarm"]
