"""User messages in a zone whose clocks move by 30 minutes (Lord Howe Island: 02:00 → 02:30 on
2026-10-04, 02:00 → 01:30 on 2026-04-05), by the reminders' rule: a local time in the gap
moves forward by the gap, one in the fold takes its first occurrence; the rule is recorded on
the occurrence, and each occurrence is one row sent once."""

from __future__ import annotations

from datetime import UTC, date, datetime, time, timedelta

import pytest

from common.localtime import LocalTimeRule
from devices.models import Farm
from notifications.models import Notification
from reminders.models import UserMessageOccurrence
from reminders.services.user_messages import user_message_update
from tests.devices.factories import FarmFactory
from tests.notifications.factories import ExternalContactFactory
from tests.reminders.conftest import notifications_for, run_due
from tests.reminders.user_messages_kit import message, rows

pytestmark = pytest.mark.django_db
SPRING = datetime(2026, 9, 30, tzinfo=UTC)  # before the gap
AUTUMN = datetime(2026, 4, 1, tzinfo=UTC)  # before the fold


def _utc(*args: int) -> datetime:
    return datetime(*args, tzinfo=UTC)


@pytest.fixture
def lord_howe(db: None) -> Farm:
    farm = FarmFactory(time_zone="Australia/Lord_Howe")
    ExternalContactFactory(farm=farm, name="Ranger", email="ranger@example.org")
    return farm


def _rules(msg) -> list[str]:
    links = UserMessageOccurrence.objects.filter(message=msg).order_by("sequence")
    return list(links.values_list("local_time_rule", flat=True))


def test_a_time_in_the_gap_moves_forward_by_the_thirty_minute_gap(lord_howe) -> None:
    msg = message(lord_howe, starts_on=date(2026, 10, 4), send_time=time(2, 15), now=SPRING)
    (row,) = rows(msg)
    # 02:15 does not exist; 02:45 (+11:00) is 15:45Z, where +10:30 would have put 02:15.
    assert (row.key_time, row.scheduled_on) == ("2026-10-03T15:45:00Z", _utc(2026, 10, 3, 15, 45))
    assert _rules(msg) == [LocalTimeRule.GAP_SHIFTED_FORWARD]


def test_a_time_in_the_fold_takes_its_first_occurrence(lord_howe) -> None:
    msg = message(lord_howe, starts_on=date(2026, 4, 5), send_time=time(1, 45), now=AUTUMN)
    (row,) = rows(msg)
    assert row.key_time == "2026-04-04T14:45:00Z"  # 01:45 at +11:00, not the second at +10:30
    assert _rules(msg) == [LocalTimeRule.FOLD_FIRST_OCCURRENCE]
    assert run_due(_utc(2026, 4, 4, 14, 45)) == {"completed": 1}
    # The second 01:45 (15:15Z) sends nothing more.
    assert run_due(_utc(2026, 4, 4, 15, 15)) == {}
    assert Notification.objects.count() == 1


def test_a_daily_message_across_the_gap_is_one_row_and_one_send_per_day(lord_howe) -> None:
    msg = message(
        lord_howe,
        recurrence="daily",
        count=4,
        starts_on=date(2026, 10, 2),
        send_time=time(2, 15),
        now=SPRING,
    )
    assert [r.key_time for r in rows(msg)] == [
        "2026-10-01T15:45:00Z",  # +10:30
        "2026-10-02T15:45:00Z",
        "2026-10-03T15:45:00Z",  # the gap day: 02:45 +11:00
        "2026-10-04T15:15:00Z",  # +11:00 from now on
    ]
    assert _rules(msg) == ["exact", "exact", "gap_shifted_forward", "exact"]
    for row in rows(msg):
        assert run_due(row.scheduled_on) == {"completed": 1}
        assert run_due(row.scheduled_on) == {}  # polled again: nothing more
    assert run_due(_utc(2026, 10, 6)) == {}
    assert [len(notifications_for(f"user-message:{msg.guid}:{r.key_time}")) for r in rows(msg)] == [
        1,
        1,
        1,
        1,
    ]


def test_a_daily_message_across_the_fold_keeps_one_row_per_day(lord_howe) -> None:
    msg = message(
        lord_howe,
        recurrence="daily",
        count=3,
        starts_on=date(2026, 4, 4),
        send_time=time(1, 45),
        now=AUTUMN,
    )
    assert [r.key_time for r in rows(msg)] == [
        "2026-04-03T14:45:00Z",
        "2026-04-04T14:45:00Z",  # the fold day: its first 01:45
        "2026-04-05T15:15:00Z",  # +10:30 from now on
    ]
    assert _rules(msg) == ["exact", "fold_first_occurrence", "exact"]


def test_moving_the_time_into_the_gap_moves_the_row_by_the_same_rule(lord_howe) -> None:
    msg = message(
        lord_howe,
        recurrence="daily",
        count=3,
        starts_on=date(2026, 10, 3),
        send_time=time(9, 0),
        now=SPRING,
    )
    before = [r.pk for r in rows(msg)]
    user_message_update(message_id=msg.pk, send_time=time(2, 15), now=SPRING + timedelta(hours=1))
    after = rows(msg)
    assert [r.pk for r in after] == before
    assert [r.key_time for r in after] == [
        "2026-10-02T15:45:00Z",
        "2026-10-03T15:45:00Z",
        "2026-10-04T15:15:00Z",
    ]
    assert _rules(msg) == ["exact", "gap_shifted_forward", "exact"]
