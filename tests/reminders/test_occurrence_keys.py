"""The occurrence links' scheduler keys are unique constraints (issue 26), not ``unique=True``
with its pattern-ops copy: a second link with the same key is still absorbed."""

from __future__ import annotations

from datetime import date, time

import pytest

from reminders.models import ReminderOccurrence, UserMessageOccurrence
from tests.reminders.conftest import date_setting, document
from tests.reminders.user_messages_kit import message
from tests.unique_keys import key_absorbs_copies

pytestmark = pytest.mark.django_db


def test_a_reminder_occurrence_copy_is_absorbed_by_its_scheduler_key(farm, bus) -> None:
    with bus.commit():
        date_setting(farm, offsets_days=[1], send_time=time(9, 0))
        doc = document(farm, date(2026, 6, 30))
    link = ReminderOccurrence.objects.get(source_guid=doc.guid)
    key_absorbs_copies(link, "scheduler_key", f"{link.scheduler_key}:other")


def test_a_user_message_occurrence_copy_is_absorbed_by_its_scheduler_key(farm) -> None:
    msg = message(farm)
    link = UserMessageOccurrence.objects.get(message=msg)
    # Another sequence number: (message, sequence) is a unique key of its own.
    key_absorbs_copies(link, "scheduler_key", f"{link.scheduler_key}:other", sequence=99)
