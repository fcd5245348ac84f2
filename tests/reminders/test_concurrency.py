"""The event path, a redelivery and reconciliation may run the same source at once (and two
beats the same subscription): on PostgreSQL, threads racing on one source end with one row
and one link per key, and one report row per period."""

from __future__ import annotations

from collections.abc import Callable
from datetime import date, timedelta

import pytest

from reminders.models import ReminderOccurrence
from reminders.services.reports.subscriptions import report_subscription_ensure
from reminders.services.sync import reminder_source_sync
from scheduler.models import DueWork
from tests.concurrency import race as race_threads
from tests.reminders.conftest import NOW, date_setting, document
from tests.reminders.test_reports import subscribe

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

THREADS = 6


def race(work: Callable[[], object]) -> list[BaseException]:
    return race_threads(work, THREADS, join_s=30)


def test_concurrent_syncs_of_one_source_leave_one_row_and_link_per_key(farm) -> None:
    date_setting(farm, offsets_days=[30, 14, 7, 1])
    doc = document(farm, date(2026, 6, 30))  # no bus: its event is lost, the threads repair

    def sync() -> None:
        reminder_source_sync(source_type="document", source_guid=doc.guid, now=NOW)

    assert race(sync) == []
    keys = list(DueWork.objects.values_list("scheduler_key", "status"))
    assert len(keys) == 4 and {s for _, s in keys} == {"pending"}
    assert ReminderOccurrence.objects.count() == 4


def test_two_beats_ensuring_one_period_create_one_row(farm) -> None:
    sub = subscribe(farm)
    DueWork.objects.all().delete()

    def ensure() -> None:
        report_subscription_ensure(subscription_id=sub.pk, now=NOW + timedelta(hours=2))

    assert race(ensure) == []
    assert DueWork.objects.count() == 1
