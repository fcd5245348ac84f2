"""Time-based rules: occurrences as scheduler rows keyed rule-schedule:{ruleId}:{utc}, run
once, late ones skipped/too_late, edits honoured at due time, the DST rule of reminders."""

from __future__ import annotations

from datetime import UTC, datetime, time, timedelta
from io import StringIO
from typing import Any

import pytest
import time_machine
from django.contrib.auth.models import User
from django.core.management import call_command
from django.db import connection
from django.test.utils import CaptureQueriesContext

from automation.diagnostics import command_timeline
from automation.models import (
    AutomationRule,
    AutomationRuleAction,
    AutomationRuleExecution,
    AutomationRuleSchedule,
    DeviceCommand,
)
from automation.services.manual import endpoint_command_manual
from automation.services.rule_schedules import (
    rule_occurrences,
    rule_schedule_rows_sync,
    rule_schedules_ensure,
    rule_schedules_ensure_due,
)
from automation.states import CommandOrigin, ExecutionOutcome, ReasonCode
from common.localtime import LocalTimeRule
from scheduler.models import DueWork
from scheduler.services.execute import scheduler_process_due
from scheduler.states import SchedulerReason, SchedulerStatus
from tests.devices.factories import FarmKit, make_farm

pytestmark = pytest.mark.django_db

# 05:59 in Europe/Berlin on a Sunday (UTC+1 in winter).
NOW = datetime(2026, 11, 29, 4, 59, tzinfo=UTC)


def scheduled_rule(kit: FarmKit, at: time = time(6, 0), **fields: Any) -> AutomationRule:
    """ "At 06:00 every day set the relay on": no trigger endpoint, one schedule."""
    kit.farm.time_zone = "Europe/Berlin"
    kit.farm.save(update_fields=["time_zone"])
    rule = AutomationRule.objects.create(
        farm=kit.farm,
        name="pump on at six",
        target_endpoint=kit.io1,
        target_value=fields.pop("target_value", True),
        **fields,
    )
    AutomationRuleSchedule.objects.create(rule=rule, local_time=at, max_lateness_s=900)
    AutomationRuleSchedule.objects.filter(rule=rule).update(updated_at=NOW - timedelta(hours=1))
    return rule


def run_due(at: datetime) -> dict[str, int]:
    with time_machine.travel(at, tick=False):
        return dict(scheduler_process_due())


def rows_of(rule: AutomationRule) -> list[DueWork]:
    prefix = f"rule-schedule:{rule.pk}:"
    return list(DueWork.objects.filter(scheduler_key__startswith=prefix).order_by("scheduled_on"))


def test_occurrences_are_rows_keyed_by_rule_and_instant_up_to_the_horizon() -> None:
    kit = make_farm()
    rule = scheduled_rule(kit)
    assert rule_schedules_ensure_due(now=NOW) == 2  # this morning's and tomorrow's
    keys = [r.scheduler_key for r in rows_of(rule)]
    assert keys == [
        f"rule-schedule:{rule.pk}:2026-11-29T05:00:00Z",
        f"rule-schedule:{rule.pk}:2026-11-30T05:00:00Z",
    ]
    assert [r.automation_type for r in rows_of(rule)] == ["rule_schedule"] * 2
    assert rule_schedules_ensure_due(now=NOW) == 0  # the rows are there: nothing written


def test_an_occurrence_missed_with_beat_down_too_still_ends_visibly() -> None:
    """Beat was down longer than the horizon: yesterday's occurrence gets its row late, and
    ends skipped/too_late rather than vanishing (or acting a day late)."""
    kit = make_farm()
    rule = scheduled_rule(kit)
    AutomationRuleSchedule.objects.filter(rule=rule).update(updated_at=NOW - timedelta(days=3))
    rule_schedules_ensure_due(now=NOW)
    run_due(NOW)
    yesterday = rows_of(rule)[0]
    assert yesterday.scheduler_key.endswith("2026-11-28T05:00:00Z")
    execution = AutomationRuleExecution.objects.get(occurrence=yesterday)
    assert (execution.outcome, execution.failure_reason) == ("skipped", "too_late")
    assert not DeviceCommand.objects.exists()


def test_beat_ensure_costs_the_same_queries_for_one_rule_and_for_many() -> None:
    def queries(n: int) -> int:
        kits = [make_farm() for _ in range(n)]
        rules = [scheduled_rule(kit) for kit in kits]
        rule_schedules_ensure(rule_ids=[r.pk for r in rules], now=NOW)
        with CaptureQueriesContext(connection) as ctx:
            rule_schedules_ensure(rule_ids=[r.pk for r in rules], now=NOW)
        return len(ctx.captured_queries)

    assert queries(1) == queries(5)


def test_a_due_occurrence_sends_the_command_with_origin_schedule_once() -> None:
    kit = make_farm()
    rule = scheduled_rule(kit)
    rule_schedules_ensure_due(now=NOW)
    at = datetime(2026, 11, 29, 5, 0, 5, tzinfo=UTC)
    assert run_due(at).get("completed") == 1
    intent = DeviceCommand.objects.get()
    assert (intent.origin, intent.rule_id, intent.target_value) == (
        CommandOrigin.SCHEDULE,
        rule.pk,
        True,
    )
    execution = intent.rule_execution
    assert execution is not None and execution.event_id is None
    assert execution.occurrence_id == rows_of(rule)[0].pk
    assert run_due(at + timedelta(seconds=5)) == {}  # nothing more is due
    # The row, run again (a redelivered task, a second claim), finds it completed.
    assert DeviceCommand.objects.count() == 1
    timeline = command_timeline(command=intent)
    assert timeline.ids["origin"] == "schedule"
    assert timeline.ids["occurrenceId"] == execution.occurrence_id
    assert any("rule schedule occurrence" in e.what for e in timeline.entries)


def test_an_occurrence_found_later_than_its_lateness_ends_skipped_too_late() -> None:
    kit = make_farm()
    rule = scheduled_rule(kit)
    rule_schedules_ensure_due(now=NOW)
    # Workers were down: they come back 20 minutes after 06:00 (lateness 15 minutes).
    run_due(datetime(2026, 11, 29, 5, 20, tzinfo=UTC))
    assert not DeviceCommand.objects.exists()
    execution = AutomationRuleExecution.objects.get(rule=rule)
    assert (execution.outcome, execution.failure_reason) == (
        ExecutionOutcome.SKIPPED,
        ReasonCode.TOO_LATE,
    )
    row = rows_of(rule)[0]
    assert row.status == SchedulerStatus.COMPLETED
    assert row.dispatch_result_json["outcome"] == "skipped"


def test_within_the_lateness_a_missed_occurrence_runs_once_when_workers_return() -> None:
    kit = make_farm()
    rule = scheduled_rule(kit)
    rule_schedules_ensure_due(now=NOW)
    run_due(datetime(2026, 11, 29, 5, 10, tzinfo=UTC))
    run_due(datetime(2026, 11, 29, 5, 11, tzinfo=UTC))
    assert DeviceCommand.objects.filter(rule=rule).count() == 1


def test_an_edited_time_deactivates_the_old_occurrence_at_due_time() -> None:
    kit = make_farm()
    rule = scheduled_rule(kit)
    rule_schedules_ensure_due(now=NOW)
    AutomationRuleSchedule.objects.filter(rule=rule).update(local_time=time(6, 30))
    run_due(datetime(2026, 11, 29, 5, 0, 5, tzinfo=UTC))
    old = rows_of(rule)[0]
    assert (old.status, old.failure_reason_code) == (
        SchedulerStatus.DEACTIVATED,
        SchedulerReason.SETTING_CHANGED,
    )
    assert not DeviceCommand.objects.exists()


def test_an_inactive_rule_sends_nothing() -> None:
    kit = make_farm()
    rule = scheduled_rule(kit)
    rule_schedules_ensure_due(now=NOW)
    AutomationRule.objects.filter(pk=rule.pk).update(is_active=False)
    run_due(datetime(2026, 11, 29, 5, 0, 5, tzinfo=UTC))
    assert rows_of(rule)[0].status == SchedulerStatus.DEACTIVATED
    assert not DeviceCommand.objects.exists()


def test_conditions_of_a_scheduled_rule_must_hold_on_fresh_readings() -> None:
    kit = make_farm()
    rule = scheduled_rule(
        kit, trigger_endpoint=kit.temp, operator="gt", threshold_value=25, condition_window_s=600
    )
    rule_schedules_ensure_due(now=NOW)
    at = datetime(2026, 11, 29, 5, 0, 5, tzinfo=UTC)
    kit.temp.last_value, kit.temp.last_value_at = 30, at - timedelta(hours=1)  # too old
    kit.temp.save(update_fields=["last_value", "last_value_at"])
    run_due(at)
    assert not DeviceCommand.objects.exists()
    assert rows_of(rule)[0].dispatch_result_json["outcome"] == "conditions_not_met"
    kit.temp.last_value_at = datetime(2026, 11, 30, 4, 58, tzinfo=UTC)  # fresh tomorrow
    kit.temp.save(update_fields=["last_value_at"])
    run_due(datetime(2026, 11, 30, 5, 0, 5, tzinfo=UTC))
    assert DeviceCommand.objects.filter(rule=rule).count() == 1


def test_each_action_of_a_scheduled_rule_is_its_own_command() -> None:
    kit = make_farm()
    rule = scheduled_rule(kit)
    AutomationRuleAction.objects.create(rule=rule, target_endpoint=kit.fan, target_value=60)
    rule_schedules_ensure_due(now=NOW)
    run_due(datetime(2026, 11, 29, 5, 0, 5, tzinfo=UTC))
    sent = dict(DeviceCommand.objects.values_list("target_device_endpoint_id", "target_value"))
    assert sent == {kit.io1.pk: True, kit.fan.pk: 60}


def test_a_manual_hold_suppresses_the_scheduled_decision() -> None:
    kit = make_farm()
    rule = scheduled_rule(kit)
    rule_schedules_ensure_due(now=NOW)
    operator = User.objects.create_user("op")
    with time_machine.travel(datetime(2026, 11, 29, 4, 55, tzinfo=UTC), tick=False):
        manual = endpoint_command_manual(
            endpoint_id=kit.io1.pk, value=False, actor=operator, reason="pump serviced"
        )
    run_due(datetime(2026, 11, 29, 5, 0, 5, tzinfo=UTC))
    execution = AutomationRuleExecution.objects.get(rule=rule)
    assert (execution.outcome, execution.failure_reason, execution.suppressed_by_id) == (
        ExecutionOutcome.SUPPRESSED,
        ReasonCode.MANUAL_OVERRIDE,
        manual.command.pk,
    )
    assert DeviceCommand.objects.filter(origin=CommandOrigin.SCHEDULE).count() == 0


def test_occurrences_follow_the_dst_rule_of_reminders() -> None:
    """Lord Howe shifts by 30 minutes: 02:15 does not exist on 2026-10-04 (02:00 → 02:30) and
    moves forward by the gap; 01:45 happens twice on 2026-04-05 and runs at its first."""
    kit = make_farm()
    kit.farm.time_zone = "Australia/Lord_Howe"
    kit.farm.save(update_fields=["time_zone"])
    rule = AutomationRule.objects.create(
        farm=kit.farm, name="night", target_endpoint=kit.io1, target_value=True
    )
    AutomationRuleSchedule.objects.create(rule=rule, local_time=time(2, 15))
    AutomationRuleSchedule.objects.create(rule=rule, local_time=time(1, 45))
    rule = (
        AutomationRule.objects.prefetch_related("schedules").select_related("farm").get(pk=rule.pk)
    )
    rule.active_schedules = list(rule.schedules.order_by("local_time"))  # type: ignore[attr-defined]
    gap = rule_occurrences(
        rule, datetime(2026, 10, 3, 14, 0, tzinfo=UTC), datetime(2026, 10, 4, 14, 0, tzinfo=UTC)
    )
    shifted = [o for o in gap if o.schedule.local_time == time(2, 15)]
    assert [o.local_time_rule for o in shifted] == [LocalTimeRule.GAP_SHIFTED_FORWARD]
    assert shifted[0].utc == datetime(2026, 10, 3, 15, 45, tzinfo=UTC)  # 02:45 +11:00
    fold = rule_occurrences(
        rule, datetime(2026, 4, 4, 13, 0, tzinfo=UTC), datetime(2026, 4, 5, 13, 0, tzinfo=UTC)
    )
    first = [o for o in fold if o.schedule.local_time == time(1, 45)]
    assert [o.local_time_rule for o in first] == [LocalTimeRule.FOLD_FIRST_OCCURRENCE]
    assert first[0].utc == datetime(2026, 4, 4, 14, 45, tzinfo=UTC)  # 01:45 +11:00, not +10:30


def test_an_edit_moves_the_pending_rows_and_a_reverted_edit_reactivates_them() -> None:
    kit = make_farm()
    rule = scheduled_rule(kit)
    rule_schedules_ensure_due(now=NOW)
    AutomationRuleSchedule.objects.filter(rule=rule).update(local_time=time(6, 30))
    assert rule_schedule_rows_sync(rule_id=rule.pk, now=NOW) == (2, 2)
    statuses = {r.scheduler_key[-20:]: r.status for r in rows_of(rule)}
    assert statuses == {
        "2026-11-29T05:00:00Z": "deactivated",
        "2026-11-29T05:30:00Z": "pending",
        "2026-11-30T05:00:00Z": "deactivated",
        "2026-11-30T05:30:00Z": "pending",
    }
    AutomationRuleSchedule.objects.filter(rule=rule).update(local_time=time(6, 0))
    assert rule_schedule_rows_sync(rule_id=rule.pk, now=NOW) == (2, 2)
    pending = [r.scheduler_key[-20:] for r in rows_of(rule) if r.status == "pending"]
    assert pending == ["2026-11-29T05:00:00Z", "2026-11-30T05:00:00Z"]
    run_due(datetime(2026, 11, 29, 5, 0, 5, tzinfo=UTC))
    assert DeviceCommand.objects.filter(rule=rule).count() == 1


def test_the_timeline_command_shows_a_scheduled_command_with_its_occurrence() -> None:
    """As it shows who asked for a manual command, the timeline names a scheduled one's origin
    and the occurrence that made it (due time, local date and zone, the row's key)."""
    kit = make_farm()
    rule = scheduled_rule(kit)
    rule_schedules_ensure_due(now=NOW)
    run_due(datetime(2026, 11, 29, 5, 0, 5, tzinfo=UTC))
    intent = DeviceCommand.objects.get()
    row = rows_of(rule)[0]
    for ref in (f"intent:{intent.pk}", f"execution:{intent.rule_execution_id}"):
        out = StringIO()
        call_command("timeline", ref, stdout=out)
        printed = out.getvalue()
        assert "origin=schedule" in printed and f"occurrenceId={row.pk}" in printed
        assert "requestedBy" not in printed and "eventId" not in printed
        assert "rule schedule occurrence due (local 2026-11-29, Europe/Berlin)" in printed
        assert f"rule-schedule:{rule.pk}:2026-11-29T05:00:00Z" in printed
        assert "schedule command created" in printed
        assert f"by rule {rule.pk}'s schedule" in printed
