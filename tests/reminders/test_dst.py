"""Local send times → UTC on real zoneinfo transitions: a nonexistent local time moves
forward by the gap, an ambiguous one takes the first occurrence, and the rule is recorded.
A reminder due on a transition fires once, at the documented instant."""

from __future__ import annotations

from datetime import UTC, date, datetime, time, timedelta

import pytest

from common.localtime import LocalTimeRule, date_minus_days, local_to_utc
from reminders.models import ReminderOccurrence
from scheduler.models import DueWork
from tests.reminders.conftest import date_setting, document, notifications_for, run_due

EXACT = LocalTimeRule.EXACT
GAP = LocalTimeRule.GAP_SHIFTED_FORWARD
FOLD = LocalTimeRule.FOLD_FIRST_OCCURRENCE


def _utc(*args: int) -> datetime:
    return datetime(*args, tzinfo=UTC)


@pytest.mark.parametrize(
    ("zone", "day", "at", "utc", "rule"),
    [
        # Berlin spring forward 2026-03-29 02:00 → 03:00: 02:30 becomes 03:30 CEST.
        ("Europe/Berlin", date(2026, 3, 29), time(2, 30), _utc(2026, 3, 29, 1, 30), GAP),
        # Berlin fall back 2026-10-25 03:00 → 02:00: 02:30 happens twice; the first (CEST).
        ("Europe/Berlin", date(2026, 10, 25), time(2, 30), _utc(2026, 10, 25, 0, 30), FOLD),
        ("Europe/Berlin", date(2026, 10, 25), time(9, 0), _utc(2026, 10, 25, 8, 0), EXACT),
        # New York spring forward 2026-03-08 02:00 → 03:00.
        ("America/New_York", date(2026, 3, 8), time(2, 30), _utc(2026, 3, 8, 7, 30), GAP),
        # New York fall back 2026-11-01 02:00 → 01:00: 01:30 EDT first.
        ("America/New_York", date(2026, 11, 1), time(1, 30), _utc(2026, 11, 1, 5, 30), FOLD),
        # Lord Howe moves by 30 minutes: 02:00 → 02:30 on 2026-10-04 ...
        ("Australia/Lord_Howe", date(2026, 10, 4), time(2, 15), _utc(2026, 10, 3, 15, 45), GAP),
        # ... and 02:00 → 01:30 on 2026-04-05: 01:45 twice, the first at +11:00.
        ("Australia/Lord_Howe", date(2026, 4, 5), time(1, 45), _utc(2026, 4, 4, 14, 45), FOLD),
        # Samoa skipped 2011-12-30 entirely (−10 → +14): moved forward a whole day.
        ("Pacific/Apia", date(2011, 12, 30), time(9, 0), _utc(2011, 12, 30, 19, 0), GAP),
        ("Pacific/Apia", date(2011, 12, 31), time(9, 0), _utc(2011, 12, 30, 19, 0), EXACT),
        ("Pacific/Apia", date(2011, 12, 29), time(9, 0), _utc(2011, 12, 29, 19, 0), EXACT),
    ],
)
def test_local_to_utc_on_real_transitions(zone, day, at, utc, rule) -> None:
    instant = local_to_utc(day, at, zone)
    assert (instant.utc, instant.rule) == (utc, rule)


def test_offsets_are_calendar_days_not_24_hour_steps() -> None:
    """30 days before 2026-04-15 is 2026-03-16 at the same wall time, although a DST change
    lies between (29 days and 23 hours of elapsed time in Berlin)."""
    local = date_minus_days(date(2026, 4, 15), 30)
    assert local == date(2026, 3, 16)
    before = local_to_utc(local, time(9, 0), "Europe/Berlin").utc
    target = local_to_utc(date(2026, 4, 15), time(9, 0), "Europe/Berlin").utc
    assert target - before == timedelta(days=30) - timedelta(hours=1)


@pytest.mark.django_db
def test_a_reminder_due_in_a_dst_gap_fires_once_at_the_documented_instant(farm, bus) -> None:
    """Send time 02:30 on the spring-forward day: documented as 03:30 CEST (01:30 UTC)."""
    with bus.commit():
        date_setting(farm, offsets_days=[0], send_time=time(2, 30))
        doc = document(farm, date(2026, 3, 29))
    link = ReminderOccurrence.objects.get(source_guid=doc.guid)
    assert (link.local_time_rule, link.scheduled_on) == (GAP, _utc(2026, 3, 29, 1, 30))
    row = DueWork.objects.get()
    assert row.scheduled_local_date == date(2026, 3, 29)
    assert row.time_zone_id == "Europe/Berlin"
    assert run_due(_utc(2026, 3, 29, 1, 29, 59)) == {}
    assert run_due(_utc(2026, 3, 29, 1, 30)) == {"completed": 1}
    assert run_due(_utc(2026, 3, 29, 2, 30)) == {}
    assert len(notifications_for(row.scheduler_key)) == 1


@pytest.mark.django_db
def test_a_reminder_due_in_a_dst_fold_fires_once_at_the_first_occurrence(farm, bus) -> None:
    with bus.commit():
        date_setting(farm, offsets_days=[0], send_time=time(2, 30))
        doc = document(farm, date(2026, 10, 25))
    link = ReminderOccurrence.objects.get(source_guid=doc.guid)
    assert (link.local_time_rule, link.scheduled_on) == (FOLD, _utc(2026, 10, 25, 0, 30))
    assert run_due(_utc(2026, 10, 25, 0, 30)) == {"completed": 1}
    assert run_due(_utc(2026, 10, 25, 1, 30)) == {}  # the second 02:30 sends nothing
    assert len(notifications_for(DueWork.objects.get().scheduler_key)) == 1
