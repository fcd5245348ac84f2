"""A command sent and never answered for may have been applied all the same: a relay whose
ack, state report and telemetry were all lost switched, and nobody saw it. Its older report
then no longer says what it holds, so the next decision asking for that old value sends a
command instead of finding it ``already_in_state``, and the run-time limit's follow-up does
too. A report newer than that sending makes the device's word good again."""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from typing import Any

import pytest
from django.conf import settings
from django.utils import timezone

from automation.models import AutomationRuleExecution, DeviceCommand
from automation.services.dispatch import command_dispatch
from automation.services.evaluate import endpoint_events_evaluate
from automation.services.ingest import telemetry_ingest
from automation.services.reconcile import command_reconcile
from automation.services.targets import target_states_load
from automation.states import CommandStatus
from devices.mqtt.messages import InboundTelemetry
from tests.automation.conftest import fake_publish
from tests.devices.factories import FarmKit, make_farm

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("clock_at_fixture_dates")]


def _ingest(serial: str, ts: str, **values: Any) -> list[int]:
    payload = json.dumps({"ts": f"2026-11-29T{ts}Z", "values": values})
    message = InboundTelemetry(serial, payload, timezone.now())
    return telemetry_ingest(messages=[message]).pending_event_ids


def _decide(kit: FarmKit, temp: float, ts: str) -> AutomationRuleExecution:
    endpoint_events_evaluate(event_ids=_ingest(kit.sensor.serial_number, ts, temp=temp))
    return AutomationRuleExecution.objects.latest("pk")


def _sent_and_never_answered(command: DeviceCommand) -> tuple[DeviceCommand, datetime]:
    """Every attempt published, none acknowledged: the retry budget runs out. Returns the
    command and the time after its last sending."""
    now = timezone.now()
    for _ in range(2 * settings.COMMAND_MAX_ATTEMPTS):
        command_dispatch(command_id=command.pk, publish=fake_publish, now=now)
        now += timedelta(seconds=1)
        command_reconcile(command_id=command.pk, now=now)  # past the ack deadline
        now += timedelta(seconds=1)
        command = DeviceCommand.objects.get(pk=command.pk)
        if command.status == CommandStatus.EXPIRED:
            return command, now
    raise AssertionError(f"command {command.pk} still {command.status}")


@pytest.fixture
def kit(settings: Any) -> FarmKit:
    """A relay on when warm, off when cool, that last reported it is on."""
    settings.ACK_TIMEOUT_S = 0.5
    settings.RETRY_BACKOFF_S = (0.5, 0.5, 0.5)
    kit = make_farm()
    kit.rule(operator="gt", threshold_value=30, target_value=True)
    kit.rule(operator="lt", threshold_value=20, target_value=False)
    _ingest(kit.actuator.serial_number, "11:58:00", io1=True)
    return kit


def test_a_value_sent_and_never_answered_for_is_asked_for_again(kit: FarmKit) -> None:
    off = _decide(kit, 15, "11:58:10")
    assert off.outcome == "intent_created"
    lost, _ = _sent_and_never_answered(DeviceCommand.objects.get(rule_execution=off))
    assert lost.status_reason == "retry_budget_exhausted"
    assert target_states_load([kit.io1.pk])[kit.io1.pk].reported_unsure
    on = _decide(kit, 35, "11:58:20")  # the relay said "on" before the "off" went out
    assert on.outcome == "intent_created"


def test_a_report_after_that_sending_is_believed_again(kit: FarmKit) -> None:
    off = _decide(kit, 15, "11:58:10")
    _, after = _sent_and_never_answered(DeviceCommand.objects.get(rule_execution=off))
    later = after.strftime("%H:%M:%S")
    _ingest(kit.actuator.serial_number, later, io1=True)  # the relay speaks again: on
    assert not target_states_load([kit.io1.pk])[kit.io1.pk].reported_unsure
    assert _decide(kit, 35, later).outcome == "already_in_state"


def test_without_an_unanswered_command_the_report_decides(kit: FarmKit) -> None:
    assert _decide(kit, 35, "11:58:10").outcome == "already_in_state"
