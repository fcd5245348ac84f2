"""A DateBased reminder, end to end through the scheduler and the email channel: the
message's dates are in the farm's zone."""

from __future__ import annotations

from datetime import UTC, date, datetime

import pytest
from django.core import mail

from notifications.models import Notification
from notifications.services import notification_deliver
from scheduler.models import DueWork
from tests.reminders.conftest import date_setting, document, run_due

pytestmark = pytest.mark.django_db

DUE = datetime(2026, 6, 23, 7, 0, tzinfo=UTC)  # 09:00 in Berlin (CEST), 7 days before expiry


def test_a_date_based_reminder_arrives_as_an_email_in_the_farms_zone(farm, bus, settings):
    settings.EMAIL_BACKEND = "django.core.mail.backends.locmem.EmailBackend"
    with bus.commit():
        date_setting(farm, offsets_days=[7])
        document(farm, date(2026, 6, 30))
    row = DueWork.objects.get()
    assert row.scheduled_on == DUE
    assert run_due(DUE) == {"completed": 1}
    for notification in Notification.objects.filter(channel="email"):
        notification_deliver(notification_id=notification.pk, now=DUE)
    assert run_due(DUE) == {}  # nothing due twice
    (message,) = mail.outbox
    assert message.to == ["vet@example.org"]
    assert "expires on Tuesday, 30 June 2026 (7 days" in message.body
    assert "23 June 2026, 09:00 CEST" in message.body  # 07:00 UTC shown in Berlin time
