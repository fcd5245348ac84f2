"""Diagnostics (docs/spec.md §9): a command's timeline from event to receipts, the lists of
retrying and uncertain commands, and the devices with the most timeouts."""

from __future__ import annotations

from datetime import timedelta
from io import StringIO

import pytest
import time_machine
from django.core.management import CommandError, call_command
from django.utils import timezone

from automation.diagnostics import (
    TimelineNotFound,
    commands_retrying,
    commands_uncertain,
    devices_top_timeouts,
    timeline_lookup,
)
from automation.models import DeviceCommand
from automation.states import CommandStatus
from tests.automation.conftest import ack, dispatch, make_intent, state, time_out
from tests.devices.factories import make_farm

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("clock_at_fixture_dates")]


def _retried_then_applied() -> DeviceCommand:
    """Dispatched, timed out, dispatched again, acknowledged, applied."""
    kit = make_farm(prefix="diag")
    kit.rule()
    with time_machine.travel(timezone.now(), tick=False) as clock:
        intent = dispatch(make_intent(kit))
        clock.move_to(intent.deadline_at + timedelta(seconds=1))
        intent = time_out(intent)
        assert intent.status == CommandStatus.RETRYING
        clock.move_to(intent.next_attempt_at + timedelta(seconds=0.1))
        intent = dispatch(intent)
        clock.shift(0.2)
        intent = ack(intent)
        clock.shift(0.2)
        return state(intent, True)


def test_command_timeline_walks_event_to_each_attempt_and_receipt() -> None:
    intent = _retried_then_applied()
    assert intent.status == CommandStatus.APPLIED
    timeline = timeline_lookup(ref=intent.device_command_id)
    stages = [e.stage for e in timeline.entries]
    assert stages[:4] == ["telemetry", "event", "execution", "command"]
    created = timeline.entries[3].what
    assert created.startswith("rule command created: setIO io1=true to ")  # not {'io1': True}
    moves = [(e.what, e.reason, e.attempt) for e in timeline.entries if e.stage == "transition"]
    assert moves == [
        ("pending_dispatch -> dispatched", "dispatched", 1),
        ("dispatched -> retrying", "ack_timeout", 1),
        ("retrying -> dispatched", "dispatched", 2),
        ("dispatched -> acknowledged", "acknowledged", 2),
        ("acknowledged -> applied", "state_reported", 2),
    ]
    receipts = [e.what for e in timeline.entries if e.stage == "receipt"]
    assert [what.split()[0] for what in receipts] == [
        "timeout_mark",
        "retry_mark",
        "rpc_ack",
        "state_report",
    ]
    assert receipts[-1] == "state_report io1=true"
    assert [e.at for e in timeline.entries] == sorted(e.at for e in timeline.entries)
    assert timeline.ids["deviceCommandId"] == intent.device_command_id
    assert timeline.ids["ruleExecutionId"] == intent.rule_execution_id
    # The same timeline by command id (and its earlier name, intent) and by execution id.
    assert timeline_lookup(ref=f"command:{intent.pk}").entries == timeline.entries
    assert timeline_lookup(ref=f"intent:{intent.pk}").entries == timeline.entries
    assert [e.ref for e in timeline.entries if e.stage == "command"] == [f"command:{intent.pk}"]
    assert timeline_lookup(ref=str(intent.rule_execution_id)).entries == timeline.entries


def test_timeline_outside_the_callers_organisations_is_not_found() -> None:
    intent = _retried_then_applied()
    with pytest.raises(TimelineNotFound):
        timeline_lookup(ref=f"intent:{intent.pk}", scope=frozenset({-1}))
    with pytest.raises(TimelineNotFound):
        timeline_lookup(ref="cmd_NOPE")


def test_lists_of_retrying_and_uncertain_commands_and_top_timeouts() -> None:
    flaky, steady = make_farm(prefix="flaky"), make_farm(prefix="steady")
    flaky.rule()
    steady.rule()
    retrying = time_out(dispatch(make_intent(flaky)))
    uncertain = ack(dispatch(make_intent(steady)))
    later = uncertain.acknowledged_at + timedelta(hours=1)
    from automation.services.reconcile import command_reconcile

    command_reconcile(command_id=uncertain.pk, now=later)
    assert [i.pk for i in commands_retrying()] == [retrying.pk]
    assert [i.pk for i in commands_uncertain()] == [uncertain.pk]
    top = devices_top_timeouts(since=timezone.now() - timedelta(hours=1))
    assert [(d.serial_number, d.timeouts) for d in top] == [("flaky-relay", 1)]
    scoped = devices_top_timeouts(
        since=timezone.now() - timedelta(hours=1),
        scope=frozenset({steady.farm.organization_id}),
    )
    assert scoped == []


def test_timeline_and_diagnostics_commands_print_tables() -> None:
    intent = _retried_then_applied()
    out = StringIO()
    call_command("timeline", intent.device_command_id, stdout=out)
    text = out.getvalue()
    assert "retrying -> dispatched" in text and "state_report" in text
    assert f"deviceCommandId={intent.device_command_id}" in text
    with pytest.raises(CommandError):
        call_command("timeline", "command:999999", stdout=StringIO())
    kit = make_farm(prefix="late")
    kit.rule()
    time_out(dispatch(make_intent(kit)))
    out = StringIO()
    call_command("diagnostics", "--window-hours", "2", stdout=out)
    text = out.getvalue()
    assert "Commands retrying (1)" in text
    assert text.splitlines()[1].split()[0] == "command"  # the column a person reads, not "intent"
    assert "late-relay" in text
    assert "Devices with the most ack timeouts" in text
