"""Watchdogs (``silent_for``): a silence of the trigger endpoint fires once, whatever sweeps
and due-work runs repeat it, and re-arms with the next reading; a reading that came before the
row ran deactivates it; while silent the watchdog holds its endpoint against lower-priority
rules; its alarm is raised once and clears when readings resume."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta

import pytest
import time_machine
from django.db import connection
from django.test.utils import CaptureQueriesContext

from alarms.models import Alarm, AlarmStatus, AlarmTransition
from automation import tasks
from automation.diagnostics import command_timeline
from automation.models import AutomationRule, AutomationRuleExecution, DeviceCommand
from automation.services.evaluate import endpoint_events_evaluate
from automation.services.ingest import telemetry_ingest
from automation.services.rules import rule_create
from automation.services.watchdog import READINGS_RESUMED, watchdogs_sweep
from automation.states import CommandOrigin, CommandStatus, ExecutionOutcome, ReasonCode
from config.task_names import SCHEDULER_POLL_DUE
from devices.models import DeviceInstanceEndpoint
from devices.mqtt.messages import InboundTelemetry
from scheduler.keys import epoch_ms
from scheduler.models import DueWork
from scheduler.services.execute import scheduler_process_due
from scheduler.states import SchedulerReason, SchedulerStatus
from tests.concurrency import race
from tests.conftest import FIXTURE_NOW
from tests.devices.factories import FarmKit, make_farm

pytestmark = pytest.mark.django_db

SILENCE_S = 600
T0 = FIXTURE_NOW - timedelta(hours=2)  # the sensor's last reading before it falls silent


@contextmanager
def clock(at: datetime) -> Iterator[None]:
    with time_machine.travel(at, tick=False):
        yield


def heater_watchdog(kit: FarmKit, **fields: object) -> AutomationRule:
    """ "temperature silent 10 min → heater (io1) off", through the rule service."""
    return rule_create(
        farm=kit.farm,
        name="heater off when the sensor is silent",
        trigger_endpoint=kit.temp,
        operator="silent_for",
        threshold_value=SILENCE_S,
        target_endpoint=kit.io1,
        target_value=False,
        **fields,  # type: ignore[arg-type]
    )


def reading(kit: FarmKit, at: datetime, **values: object) -> list[int]:
    """The sensor reports at ``at`` (device time), ingested and evaluated at that time."""
    payload = json.dumps({"ts": at.isoformat(), "values": values})
    message = InboundTelemetry(kit.sensor.serial_number, payload, at)
    with clock(at):
        ids = telemetry_ingest(messages=[message]).pending_event_ids
        endpoint_events_evaluate(event_ids=ids)
    return ids


def sweep(at: datetime) -> list[int]:
    with clock(at):
        return watchdogs_sweep(now=at).ensured


def run_due(at: datetime) -> dict[str, int]:
    with clock(at):
        return dict(scheduler_process_due(clock=lambda: at))


def watchdog_rows(rule: AutomationRule) -> list[DueWork]:
    return list(
        DueWork.objects.filter(scheduler_key__startswith=f"watchdog:{rule.pk}:").order_by("pk")
    )


def applied(kit: FarmKit) -> None:
    """The relay applied its commands and reports the newest one's value (the ledger's moves
    are not what these tests are about)."""
    newest = DeviceCommand.objects.filter(target_device_endpoint=kit.io1).order_by("pk").last()
    assert newest is not None
    DeviceCommand.objects.filter(target_device_endpoint=kit.io1).update(
        status=CommandStatus.APPLIED, inflight_endpoint=None
    )
    DeviceInstanceEndpoint.objects.filter(pk=kit.io1.pk).update(last_value=newest.target_value)


def commands_of(rule: AutomationRule) -> list[tuple[str, object]]:
    rows = DeviceCommand.objects.filter(rule=rule).order_by("pk")
    return [(c.origin, c.target_value) for c in rows]


def test_a_silence_fires_once_however_often_the_sweep_and_the_row_run() -> None:
    kit = make_farm()
    watchdog = heater_watchdog(kit)
    assert watchdog.priority == 1000  # no priority given: the top one
    reading(kit, T0, temp=15)
    almost = T0 + timedelta(seconds=SILENCE_S - 1)
    assert sweep(almost) == [] and watchdog_rows(watchdog) == []  # not silent long enough
    due = T0 + timedelta(seconds=SILENCE_S)
    assert len(sweep(due)) == 1
    assert sweep(due + timedelta(seconds=1)) == []  # the row stands for this silence
    [row] = watchdog_rows(watchdog)
    assert row.scheduler_key == f"watchdog:{watchdog.pk}:{epoch_ms(T0)}"
    assert run_due(due + timedelta(seconds=1)) == {"completed": 1}
    for later in range(2, 6):  # further sweeps and polls: nothing more
        assert sweep(due + timedelta(seconds=5 * later)) == []
        assert run_due(due + timedelta(seconds=5 * later)) == {}
    assert commands_of(watchdog) == [(CommandOrigin.WATCHDOG, False)]
    timeline = command_timeline(command=DeviceCommand.objects.get(rule=watchdog))
    assert any("watchdog" in entry.detail for entry in timeline.entries)
    assert [e.what for e in timeline.entries if e.stage == "alarm"] == [
        "major watchdog alarm raised -> active"
    ]
    execution = AutomationRuleExecution.objects.get(rule=watchdog)
    assert (execution.occurrence_id, execution.outcome) == (
        row.pk,
        ExecutionOutcome.COMMAND_CREATED,
    )
    alarm = Alarm.objects.get()
    assert (alarm.source, alarm.source_id, alarm.type) == ("rule", watchdog.pk, "watchdog")
    assert (alarm.severity, alarm.status, alarm.count) == ("major", AlarmStatus.ACTIVE, 1)


def test_a_reading_stamped_finer_than_a_millisecond_still_fires() -> None:
    """The key keeps milliseconds: the row's input must hash from the same instant the handler
    re-derives from the key, or the row goes on support hold instead of firing."""
    kit = make_farm()
    watchdog = heater_watchdog(kit)
    fine = T0 + timedelta(microseconds=123_456)
    reading(kit, fine, temp=15)
    due = fine + timedelta(seconds=SILENCE_S)
    assert len(sweep(due)) == 1
    assert run_due(due + timedelta(seconds=1)) == {"completed": 1}
    [row] = watchdog_rows(watchdog)
    assert not row.is_on_support_hold
    assert commands_of(watchdog) == [(CommandOrigin.WATCHDOG, False)]


def test_an_endpoint_never_heard_from_arms_no_watchdog() -> None:
    kit = make_farm()
    heater_watchdog(kit)
    assert sweep(FIXTURE_NOW + timedelta(days=30)) == []
    assert not DueWork.objects.exists()


def test_it_re_arms_when_readings_resume_and_fires_on_the_next_silence() -> None:
    """The heater rule switches the heater on at each cold reading; each silence switches it
    off again, and its alarm clears in between."""
    kit = make_farm()
    watchdog = heater_watchdog(kit, alarm_severity="critical")
    heater = kit.rule(operator="lt", threshold_value=18, target_value=True)
    reading(kit, T0, temp=15)
    first = T0 + timedelta(seconds=SILENCE_S)
    sweep(first)
    run_due(first)
    applied(kit)
    back = first + timedelta(seconds=30)
    reading(kit, back, temp=15)  # readings resume: the heater rule acts again
    applied(kit)  # the heater is on
    assert sweep(back + timedelta(seconds=1)) == []  # clears the alarm, fires nothing
    first_alarm = Alarm.objects.get()
    assert (first_alarm.status, first_alarm.cleared_by) == (AlarmStatus.CLEARED, READINGS_RESUMED)
    second = back + timedelta(seconds=SILENCE_S)
    assert len(sweep(second)) == 1
    run_due(second)
    keys = [r.scheduler_key for r in watchdog_rows(watchdog)]
    assert keys == [
        f"watchdog:{watchdog.pk}:{epoch_ms(T0)}",
        f"watchdog:{watchdog.pk}:{epoch_ms(back)}",
    ]
    assert [r.status for r in watchdog_rows(watchdog)] == [SchedulerStatus.COMPLETED] * 2
    assert commands_of(heater) == [(CommandOrigin.RULE, True)] * 2
    assert commands_of(watchdog) == [(CommandOrigin.WATCHDOG, False)] * 2
    newest = DeviceCommand.objects.filter(target_device_endpoint=kit.io1).order_by("pk").last()
    assert newest is not None and newest.target_value is False  # the heater ends off
    alarms = list(Alarm.objects.order_by("pk").values_list("status", "severity"))
    assert alarms == [(AlarmStatus.CLEARED, "critical"), (AlarmStatus.ACTIVE, "critical")]


def test_a_reading_before_the_row_ran_deactivates_it_and_nothing_fires() -> None:
    kit = make_farm()
    watchdog = heater_watchdog(kit)
    reading(kit, T0, temp=15)
    due = T0 + timedelta(seconds=SILENCE_S)
    sweep(due)
    reading(kit, due + timedelta(seconds=2), temp=16)  # the scheduler was slow: it is back
    assert run_due(due + timedelta(seconds=3)) == {"deactivated": 1}
    [row] = watchdog_rows(watchdog)
    assert (row.status, row.failure_reason_code) == (
        SchedulerStatus.DEACTIVATED,
        SchedulerReason.SOURCE_NO_LONGER_VALID,
    )
    assert commands_of(watchdog) == []
    assert not Alarm.objects.exists()


def test_while_silent_it_holds_the_heater_against_a_lower_priority_rule() -> None:
    """The temperature probe fell off; the same sensor still reports humidity, whose rule
    would switch the heater on: it is held (suppressed/watchdog) until the probe is back."""
    kit = make_farm()
    heater_watchdog(kit)
    humid = kit.rule(
        trigger_endpoint=kit.humidity, operator="gt", threshold_value=80, target_value=True
    )
    reading(kit, T0, temp=15)
    due = T0 + timedelta(seconds=SILENCE_S)
    sweep(due)
    run_due(due)
    reading(kit, due + timedelta(seconds=5), humidity=90)
    # While its command is on its way, the watchdog outranks the rule as any live command does.
    on_its_way = AutomationRuleExecution.objects.get(rule=humid)
    assert on_its_way.failure_reason == ReasonCode.LOWER_PRIORITY
    applied(kit)  # the heater is off; the probe is still silent
    reading(kit, due + timedelta(seconds=10), humidity=90)
    held = AutomationRuleExecution.objects.filter(rule=humid).order_by("pk").last()
    assert held is not None
    assert (held.outcome, held.failure_reason) == (ExecutionOutcome.SUPPRESSED, ReasonCode.WATCHDOG)
    assert commands_of(humid) == []
    # An equal-or-higher priority rule is not held.
    AutomationRule.objects.filter(pk=humid.pk).update(priority=1000)
    reading(kit, due + timedelta(seconds=20), humidity=91)
    assert commands_of(humid) == [(CommandOrigin.RULE, True)]
    # Back to its own priority, and the heater off again by hand.
    AutomationRule.objects.filter(pk=humid.pk).update(priority=0)
    applied(kit)
    DeviceInstanceEndpoint.objects.filter(pk=kit.io1.pk).update(last_value=False)
    reading(kit, due + timedelta(seconds=30), temp=15)  # the probe is back: the hold ends
    reading(kit, due + timedelta(seconds=40), humidity=95)
    latest = AutomationRuleExecution.objects.filter(rule=humid).order_by("pk").last()
    assert latest is not None and latest.outcome == ExecutionOutcome.COMMAND_CREATED


def test_an_edit_or_deactivation_before_due_time_deactivates_the_row() -> None:
    kit = make_farm()
    watchdog = heater_watchdog(kit)
    reading(kit, T0, temp=15)
    due = T0 + timedelta(seconds=SILENCE_S)
    sweep(due)
    AutomationRule.objects.filter(pk=watchdog.pk).update(is_active=False)
    assert run_due(due) == {"deactivated": 1}
    assert watchdog_rows(watchdog)[0].failure_reason_code == SchedulerReason.SETTING_CHANGED
    # Active again while the silence lasts: the same silence's row is ensured again and fires.
    AutomationRule.objects.filter(pk=watchdog.pk).update(is_active=True)
    assert len(sweep(due + timedelta(seconds=5))) == 1
    assert run_due(due + timedelta(seconds=5)) == {"completed": 1}
    assert commands_of(watchdog) == [(CommandOrigin.WATCHDOG, False)]


def test_the_sweep_reads_twice_when_nothing_changed() -> None:
    """However many watchdogs, silent (and fired) or not: the watchdogs and the open alarms."""

    def reads(n: int) -> int:
        DeviceCommand.objects.all().delete()
        kits = [make_farm() for _ in range(n)]
        for kit in kits:
            heater_watchdog(kit)
            reading(kit, T0, temp=15)
        quiet = make_farm()
        heater_watchdog(quiet)
        reading(quiet, T0 + timedelta(hours=1), temp=15)  # still reporting
        due = T0 + timedelta(seconds=SILENCE_S)
        sweep(due)
        run_due(due)
        with CaptureQueriesContext(connection) as ctx:
            assert sweep(due + timedelta(seconds=5)) == []
        return len(ctx.captured_queries)

    assert reads(1) == reads(4) == 2


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_concurrent_sweeps_and_runs_fire_one_silence_once() -> None:
    for _ in range(3):  # races are probabilistic: several rounds
        kit = make_farm()
        watchdog = heater_watchdog(kit)
        reading(kit, T0, temp=15)
        due = T0 + timedelta(seconds=SILENCE_S)

        def work(at: datetime = due) -> None:
            for step in range(3):
                later = at + timedelta(seconds=step)
                watchdogs_sweep(now=later)
                scheduler_process_due(clock=lambda later=later: later)

        with clock(due):
            assert race(work, 4) == []
        assert len(watchdog_rows(watchdog)) == 1
        assert commands_of(watchdog) == [(CommandOrigin.WATCHDOG, False)]
        assert AutomationRuleExecution.objects.filter(rule=watchdog).count() == 1
        alarm = Alarm.objects.get(source_id=watchdog.pk)
        assert alarm.count == 1
        assert AlarmTransition.objects.filter(alarm=alarm).count() == 1


def test_readings_resumed_clears_the_alarm_once_with_its_cause() -> None:
    kit = make_farm()
    heater_watchdog(kit)
    reading(kit, T0, temp=15)
    due = T0 + timedelta(seconds=SILENCE_S)
    sweep(due)
    run_due(due)
    reading(kit, due + timedelta(seconds=60), temp=16)
    for step in range(3):
        sweep(due + timedelta(seconds=61 + step))
    alarm = Alarm.objects.get()
    assert (alarm.status, alarm.cleared_by) == (AlarmStatus.CLEARED, READINGS_RESUMED)
    moves = list(AlarmTransition.objects.filter(alarm=alarm).values_list("to_status", "actor"))
    assert moves == [(AlarmStatus.ACTIVE, "watchdog"), (AlarmStatus.CLEARED, READINGS_RESUMED)]
    assert DeviceInstanceEndpoint.objects.get(pk=kit.temp.pk).last_value == 16


def test_the_sweep_task_queues_a_poll_only_when_it_wrote_a_row(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The row is claimed at once, not at the next due poll: a silence fires within one
    sweep."""
    sent: list[str] = []
    monkeypatch.setattr(
        "automation.services.watchdog.enqueue_on_commit",
        lambda name, *args, **kwargs: sent.append(name),
    )
    kit = make_farm()
    heater_watchdog(kit)
    reading(kit, T0, temp=15)
    due = T0 + timedelta(seconds=SILENCE_S)
    with clock(due):
        assert tasks.watchdogs_sweep_task() == 1
    with clock(due + timedelta(seconds=5)):
        assert tasks.watchdogs_sweep_task() == 0
    assert sent == [SCHEDULER_POLL_DUE]
