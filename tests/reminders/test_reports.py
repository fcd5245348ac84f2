"""Report subscriptions on the due-work table: one ScheduledRun row per period of the farm's
calendar (distinct keys, one delivery each), a ManualRun keyed by the caller's run id (asked
twice, run once), and the farm's automation summary as a rendered body plus a CSV."""

from __future__ import annotations

import uuid
from datetime import UTC, date, datetime, time, timedelta

import pytest

from automation.models import AutomationRuleExecution, DeviceCommand, DeviceCommandReceipt
from notifications.services import notification_render
from notifications.services.context import context_decode
from reminders.models import ReportSubscription
from reminders.services.reports.periods import period_of
from reminders.services.reports.subscriptions import (
    report_manual_run_request,
    report_subscription_create,
    report_subscription_update,
    report_subscriptions_ensure_due,
)
from scheduler.models import DueWork
from tests.devices.factories import stored_reading
from tests.reminders.conftest import date_setting, document, notifications_for, run_due

pytestmark = pytest.mark.django_db

CREATED = datetime(2026, 3, 2, 10, 0, tzinfo=UTC)  # Monday 11:00 in Berlin


def _utc(*args: int) -> datetime:
    return datetime(*args, tzinfo=UTC)


def subscribe(farm, recurrence: str = "daily", **overrides) -> ReportSubscription:
    fields = {
        "farm_id": farm.pk,
        "name": "Daily summary",
        "recurrence": recurrence,
        "send_time": time(7, 0),
        "recipients_policy": "external_contacts",
        "channels": ["email"],
        "now": CREATED,
    }
    fields.update(overrides)
    return report_subscription_create(**fields)


def report_rows(sub: ReportSubscription) -> list[DueWork]:
    prefix = f"report-subscription:{sub.guid}:"
    return list(DueWork.objects.filter(scheduler_key__startswith=prefix).order_by("pk"))


def test_three_periods_yield_three_rows_with_distinct_keys_and_one_delivery_each(farm) -> None:
    sub = subscribe(farm)
    for day in (3, 4, 5):
        # Beat ensures the current period's row several times per period: no duplicates.
        for minute in (0, 15, 30):
            report_subscriptions_ensure_due(now=_utc(2026, 3, day - 1, 10, minute))
        run_due(_utc(2026, 3, day, 6, 0))  # 07:00 Berlin the day after the period
    rows = report_rows(sub)
    assert [r.scheduler_key.rsplit(":scheduled:", 1)[1] for r in rows] == [
        "2026-03-01T23:00:00Z",
        "2026-03-02T23:00:00Z",
        "2026-03-03T23:00:00Z",
    ]
    assert [(r.status, r.trigger_type) for r in rows] == [("completed", "scheduled_run")] * 3
    assert [r.scheduled_on for r in rows] == [_utc(2026, 3, d, 6) for d in (3, 4, 5)]
    assert [len(notifications_for(r.scheduler_key)) for r in rows] == [1, 1, 1]


def test_a_missed_beat_still_delivers_the_previous_period(farm) -> None:
    sub = subscribe(farm)
    report_subscriptions_ensure_due(now=_utc(2026, 3, 4, 9))  # nothing ran on the 3rd
    assert [r.scheduled_local_date for r in report_rows(sub)] == [
        date(2026, 3, 3),
        date(2026, 3, 4),
        date(2026, 3, 5),
    ]
    assert run_due(_utc(2026, 3, 4, 9)) == {"completed": 2}


def test_a_manual_run_asked_twice_with_the_same_run_id_runs_once(farm) -> None:
    sub = subscribe(farm)
    run = uuid.uuid4()
    first = report_manual_run_request(subscription_id=sub.pk, run_guid=run, now=CREATED)
    second = report_manual_run_request(
        subscription_id=sub.pk, run_guid=run, now=CREATED + timedelta(seconds=5)
    )
    assert (
        first.scheduler_key
        == second.scheduler_key
        == (f"report-subscription:{sub.guid}:manual:{run}")
    )
    assert second.outcome == "unchanged"
    assert run_due(CREATED + timedelta(seconds=10)) == {"completed": 1}
    again = report_manual_run_request(subscription_id=sub.pk, run_guid=run, now=CREATED)
    assert again.outcome == "already_completed"
    assert run_due(CREATED + timedelta(minutes=1)) == {}
    assert len(notifications_for(first.scheduler_key)) == 1
    other = report_manual_run_request(subscription_id=sub.pk, run_guid=uuid.uuid4(), now=CREATED)
    assert other.scheduler_key != first.scheduler_key


def test_weekly_and_monthly_periods_follow_the_farms_calendar_across_dst() -> None:
    week = period_of(
        date(2026, 3, 25), recurrence="weekly", send_time=time(7, 0), time_zone="Europe/Berlin"
    )
    assert (week.start, week.end) == (date(2026, 3, 23), date(2026, 3, 30))
    assert week.start_utc == _utc(2026, 3, 22, 23)  # CET
    assert week.end_utc == _utc(2026, 3, 29, 22)  # CEST: the week was 167 hours long
    assert week.run_on == _utc(2026, 3, 30, 5)
    month = period_of(
        date(2026, 2, 14), recurrence="monthly", send_time=time(7, 0), time_zone="Pacific/Apia"
    )
    assert (month.start, month.end) == (date(2026, 2, 1), date(2026, 3, 1))


def test_changing_the_recurrence_replaces_the_pending_row_and_unsubscribing_cancels(farm):
    wednesday = _utc(2026, 3, 4, 10)
    sub = subscribe(farm, now=wednesday)
    (daily,) = report_rows(sub)
    report_subscription_update(subscription_id=sub.pk, recurrence="weekly", now=wednesday)
    daily.refresh_from_db()
    assert (daily.status, daily.failure_reason_code) == ("deactivated", "setting_changed")
    weekly = report_rows(sub)[-1]
    assert weekly.scheduler_key.endswith(":scheduled:2026-03-01T23:00:00Z")  # Monday
    assert weekly.status == "pending" and weekly.scheduled_on == _utc(2026, 3, 9, 6)
    report_subscription_update(subscription_id=sub.pk, send_time=time(8, 30), now=wednesday)
    moved = report_rows(sub)[-1]
    assert moved.pk == weekly.pk and moved.scheduled_on == _utc(2026, 3, 9, 7, 30)
    report_subscription_update(subscription_id=sub.pk, active=False, now=wednesday)
    assert [r.status for r in report_rows(sub)] == ["deactivated", "cancelled"]
    assert run_due(_utc(2026, 3, 10)) == {}


def test_a_period_starting_on_the_same_instant_keeps_its_key_and_moves(farm) -> None:
    """Daily → weekly on a Monday: both periods start at Monday 00:00, so it is the same key
    (docs/spec.md §4: the period start identifies the run); the row moves to the week's end."""
    sub = subscribe(farm)
    (row,) = report_rows(sub)
    report_subscription_update(subscription_id=sub.pk, recurrence="weekly", now=CREATED)
    (moved,) = report_rows(sub)
    assert moved.pk == row.pk and moved.status == "pending"
    assert moved.scheduled_on == _utc(2026, 3, 9, 6)


def test_an_inactive_subscription_at_due_time_is_deactivated(farm) -> None:
    sub = subscribe(farm)
    ReportSubscription.objects.filter(pk=sub.pk).update(active=False)
    assert run_due(_utc(2026, 3, 3, 6)) == {"deactivated": 1}
    (row,) = report_rows(sub)
    assert row.failure_reason_code == "reminder_setting_inactive"


def _intent(kit, status: str, at: datetime, n: int) -> DeviceCommand:
    stored_reading(kit.temp, at, 30 + n)
    event = kit.temp.automationendpointevent_set.order_by("-pk").first()
    rule = kit.rule()
    execution = AutomationRuleExecution.objects.create(
        event=event,
        rule=rule,
        target_endpoint=rule.target_endpoint,
        outcome="intent_created",
        created_at=at,
    )
    return DeviceCommand.objects.create(
        rule_execution=execution,
        rule=rule,
        target_device=kit.actuator,
        target_device_endpoint=kit.io1,
        target_serial_number=kit.actuator.serial_number,
        command_method="setIO",
        command_params={"io1": True},
        target_value=True,
        idempotency_key=uuid.uuid4().hex,
        desired_state_fingerprint="x",
        status=status,
        status_reason="no_applied_evidence" if status == "uncertain" else "",
        created_at=at,
        updated_at=at,
    )


def test_the_report_summarises_the_period_as_csv_and_a_rendered_body(kit, bus) -> None:
    day = _utc(2026, 3, 2, 12)
    for n, status in enumerate(["applied", "applied", "failed", "uncertain"]):
        _intent(kit, status, day, n)
    _intent(kit, "applied", _utc(2026, 3, 3, 12), 9)  # the next period: not counted
    for _ in range(2):
        DeviceCommandReceipt.objects.create(
            device=kit.actuator,
            serial_number=kit.actuator.serial_number,
            receipt_type="timeout_mark",
            payload={},
            dedupe_key=uuid.uuid4().hex,
            received_at=day,
        )
    with bus.commit():
        date_setting(kit.farm, offsets_days=[0], send_time=time(9, 0))
        document(kit.farm, date(2026, 3, 2))
    run_due(_utc(2026, 3, 2, 8))  # the reminder is sent: counted under reminders
    sub = subscribe(kit.farm)
    assert run_due(_utc(2026, 3, 3, 6)) == {"completed": 1}
    (note,) = notifications_for(report_rows(sub)[0].scheduler_key)
    (attachment,) = note.attachments
    assert attachment["content_type"] == "text/csv"
    csv = attachment["content"].splitlines()
    assert csv[0] == "section,name,value"
    for line in [
        "period,first_day,2026-03-02",
        "commands_by_state,applied,2",
        "commands_by_state,failed,1",
        "commands_by_state,uncertain,1",
        "commands,total,4",
        "commands,uncertain,1",
        f"timeouts_by_device,{kit.actuator.serial_number},2",
        "reminders,sent,1",
    ]:
        assert line in csv
    rendered = notification_render(
        template_name="farm_report",
        context=context_decode(note.context),
        locale="en",
        time_zone="Europe/Berlin",
    )
    assert rendered.subject.endswith("automation report 2026-03-02")
    assert "Commands: 4" in rendered.body and "Reminders sent: 1" in rendered.body
    assert f"{kit.actuator.serial_number}: 2" in rendered.body
