"""SchedulerKey helpers: every form of docs/spec.md §4, deterministic however the inputs are
spelled, round-tripping through the parser, and refusing components that would make a key
ambiguous."""

from __future__ import annotations

import uuid
from datetime import UTC, date, datetime, timedelta, timezone
from decimal import Decimal

import pytest

from scheduler.keys import (
    FiringPolicy,
    ReminderDateKey,
    ReportManualKey,
    SchedulerKeyError,
    parse_scheduler_key,
    reminder_date_key,
    reminder_threshold_key,
    report_manual_key,
    report_scheduled_key,
    scheduler_input_hash,
    scheduler_key,
    threshold_key,
)

SETTING = uuid.UUID("0b7e4b1a-6a8f-4c8e-8f1a-3b2c1d0e9f8a")
SOURCE = uuid.UUID("9d5c3e2f-1a0b-4c7d-8e6f-5a4b3c2d1e0f")
SUB = uuid.UUID("6f1c2a8e-4b7d-4c1e-9a51-0d2f3b4c5d6e")
RUN = uuid.UUID("11111111-2222-4333-8444-555555555555")


def test_reminder_date_key_form() -> None:
    spec = reminder_date_key(
        setting_guid=SETTING,
        source_type="document",
        source_guid=SOURCE,
        trigger_key="expiry",
        target_date=date(2026, 5, 31),
        offset_days=7,
    )
    assert scheduler_key(spec) == (f"reminder:{SETTING}:document:{SOURCE}:expiry:2026-05-31:7")


def test_reminder_threshold_key_form_with_its_threshold_key() -> None:
    tkey = threshold_key(
        metric_key="capacity_pct",
        threshold_value=90.0,
        firing_policy=FiringPolicy.ONCE_PER_DAY,
        scope_key="day:2026-03-01",
    )
    assert tkey == "capacity_pct:90:OncePerDay:day:2026-03-01"
    spec = reminder_threshold_key(
        setting_guid=SETTING,
        source_type="barn",
        source_guid=17,
        trigger_key="capacity",
        threshold_key=tkey,
    )
    assert scheduler_key(spec) == (
        f"reminder:{SETTING}:barn:17:capacity:threshold:capacity_pct:90:OncePerDay:day:2026-03-01"
    )


def test_report_scheduled_key_uses_the_utc_period_start() -> None:
    plus7 = timezone(timedelta(hours=7))
    spec = report_scheduled_key(
        subscription_guid=SUB, period_start_utc=datetime(2026, 3, 1, 7, 0, tzinfo=plus7)
    )
    assert scheduler_key(spec) == f"report-subscription:{SUB}:scheduled:2026-03-01T00:00:00Z"


def test_report_manual_key_form() -> None:
    spec = report_manual_key(subscription_guid=SUB, manual_run_guid=RUN)
    assert scheduler_key(spec) == f"report-subscription:{SUB}:manual:{RUN}"


def test_same_occurrence_spelled_differently_gives_the_same_key() -> None:
    """The event path, reconciliation and retries may hold GUIDs as UUID, upper-case text or
    hex; thresholds as int, float or Decimal; times in any zone."""
    a = reminder_date_key(
        setting_guid=SETTING,
        source_type="document",
        source_guid=SOURCE,
        trigger_key="expiry",
        target_date=date(2026, 5, 31),
        offset_days=7,
    )
    b = reminder_date_key(
        setting_guid=str(SETTING).upper(),
        source_type="document",
        source_guid=SOURCE.hex,
        trigger_key="expiry",
        target_date=date(2026, 5, 31),
        offset_days=7,
    )
    assert scheduler_key(a) == scheduler_key(b)
    values = [90, 90.0, Decimal("90.00"), "90"]
    keys = {
        threshold_key(
            metric_key="m", threshold_value=v, firing_policy="OncePerSource", scope_key="s"
        )
        for v in values
    }
    assert keys == {"m:90:OncePerSource:s"}
    t1 = report_scheduled_key(
        subscription_guid=SUB, period_start_utc=datetime(2026, 3, 1, tzinfo=UTC)
    )
    t2 = report_scheduled_key(
        subscription_guid=str(SUB),
        period_start_utc=datetime(2026, 2, 28, 19, tzinfo=timezone(timedelta(hours=-5))),
    )
    assert scheduler_key(t1) == scheduler_key(t2)


@pytest.mark.parametrize(
    "spec",
    [
        reminder_date_key(
            setting_guid=SETTING,
            source_type="invoice",
            source_guid="INV-2026.001",
            trigger_key="due",
            target_date=date(2026, 1, 2),
            offset_days=-3,
        ),
        reminder_threshold_key(
            setting_guid=SETTING,
            source_type="barn",
            source_guid=SOURCE,
            trigger_key="capacity",
            threshold_key="pct:0.5:FalseToTrue:barn:9",
        ),
        report_scheduled_key(
            subscription_guid=SUB, period_start_utc=datetime(2026, 3, 1, 0, 0, 0, 250, tzinfo=UTC)
        ),
        report_manual_key(subscription_guid=SUB, manual_run_guid=RUN),
    ],
)
def test_every_form_round_trips_through_the_parser(spec) -> None:
    assert parse_scheduler_key(scheduler_key(spec)) == spec


def test_key_forms_carry_their_automation_and_trigger_types() -> None:
    assert ReminderDateKey.automation_type == "reminder"
    assert ReminderDateKey.trigger_types[0] == "date_based"
    assert ReportManualKey.automation_type == "report_subscription"
    assert ReportManualKey.trigger_types == ("manual_run",)


@pytest.mark.parametrize(
    "build",
    [
        lambda: reminder_date_key(
            setting_guid="not-a-guid",
            source_type="doc",
            source_guid=1,
            trigger_key="x",
            target_date=date(2026, 1, 1),
            offset_days=0,
        ),
        lambda: reminder_date_key(
            setting_guid=SETTING,
            source_type="has:colon",
            source_guid=1,
            trigger_key="x",
            target_date=date(2026, 1, 1),
            offset_days=0,
        ),
        lambda: reminder_date_key(
            setting_guid=SETTING,
            source_type="doc",
            source_guid="display text with spaces",
            trigger_key="x",
            target_date=date(2026, 1, 1),
            offset_days=0,
        ),
        lambda: reminder_date_key(
            setting_guid=SETTING,
            source_type="doc",
            source_guid=1,
            trigger_key="x",
            target_date=datetime(2026, 1, 1, tzinfo=UTC),
            offset_days=0,
        ),
        lambda: report_scheduled_key(subscription_guid=SUB, period_start_utc=datetime(2026, 1, 1)),
        lambda: threshold_key(
            metric_key="m", threshold_value=float("nan"), firing_policy="OncePerDay", scope_key="s"
        ),
        lambda: threshold_key(
            metric_key="m", threshold_value=True, firing_policy="OncePerDay", scope_key="s"
        ),
    ],
)
def test_ambiguous_or_non_deterministic_components_are_refused(build) -> None:
    with pytest.raises(SchedulerKeyError):
        build()


def test_unknown_firing_policy_is_refused() -> None:
    with pytest.raises(ValueError):
        threshold_key(metric_key="m", threshold_value=1, firing_policy="Sometimes", scope_key="s")


def test_input_hash_is_independent_of_spelling_and_order() -> None:
    a = {"source": SOURCE, "due": date(2026, 5, 31), "at": datetime(2026, 1, 1, tzinfo=UTC), "n": 1}
    b = {
        "n": 1,
        "at": datetime(2026, 1, 1, 1, tzinfo=timezone(timedelta(hours=1))),
        "due": date(2026, 5, 31),
        "source": SOURCE,
    }
    assert scheduler_input_hash(a) == scheduler_input_hash(b)
    assert scheduler_input_hash(a) != scheduler_input_hash({**a, "n": 2})
    assert len(scheduler_input_hash(a)) == 64
