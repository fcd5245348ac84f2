"""Beats and editors racing on one message (PostgreSQL, threads): each locks the message
first, so the rows end one per occurrence, every one at the instant of the last edit, and
none is duplicated."""

from __future__ import annotations

import itertools
from datetime import time, timedelta
from zoneinfo import ZoneInfo

import pytest

from reminders.models import UserMessageOccurrence
from reminders.services.user_messages import user_message_ensure, user_message_update
from scheduler.models import DueWork
from tests.reminders.conftest import NOW
from tests.reminders.test_concurrency import race
from tests.reminders.user_messages_kit import message, rows

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]


def test_beats_and_time_edits_at_once_leave_one_row_per_occurrence(farm) -> None:
    msg = message(farm, recurrence="daily", count=10)
    DueWork.objects.filter(pk__in=[r.pk for r in rows(msg)[4:]]).delete()
    UserMessageOccurrence.objects.filter(message=msg, sequence__gte=4).delete()
    hours = itertools.count(10)

    def work() -> None:
        hour = next(hours)
        if hour % 2:
            user_message_ensure(message_id=msg.pk, now=NOW + timedelta(minutes=hour))
        else:
            user_message_update(message_id=msg.pk, send_time=time(hour, 0), now=NOW)

    assert race(work) == []
    msg.refresh_from_db()
    found = rows(msg)
    # 0..3 were there and moved; the beats added what their horizon reached at the time.
    assert len(found) >= 4 and [r.sequence for r in found] == list(range(len(found)))
    assert len({r.pk for r in found}) == len(found) == DueWork.objects.count()
    zone = ZoneInfo(msg.farm.time_zone)
    assert {r.scheduled_on.astimezone(zone).time() for r in found} == {msg.send_time}
    assert {r.status for r in found} == {"pending"}
