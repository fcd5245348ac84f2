"""Racing deliveries on PostgreSQL: many workers handed the same notifications at once send
each exactly once (the claim is a compare-and-set on status and version)."""

from __future__ import annotations

import threading
from collections import Counter

import pytest
from django.core import mail
from django.db import connection

from notifications.models import Notification, NotificationAttempt
from notifications.services import notification_deliver, notification_schedule

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.postgres]

WORKERS = 6


def test_racing_workers_send_each_notification_once(team, due_template):
    coordinates = notification_schedule(
        source_key="reminder:race",
        farm_id=team.farm.pk,
        recipient_policy="farm_members",
        template_name=due_template,
        channels=["email", "inbox"],
        context={
            "title": "Race",
            "who": "all",
            "due_on": team.farm.created_at.date(),
            "due_at": team.farm.created_at,
        },
    )
    ids = [c["notification_id"] for c in coordinates]
    start = threading.Barrier(WORKERS)
    outcomes: Counter[str] = Counter()
    lock = threading.Lock()

    def worker() -> None:
        try:
            start.wait()
            for notification_id in ids:
                outcome = notification_deliver(notification_id=notification_id)
                with lock:
                    outcomes[str(outcome)] += 1
        finally:
            connection.close()

    threads = [threading.Thread(target=worker) for _ in range(WORKERS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)

    assert outcomes["sent"] == len(ids)
    assert outcomes["not_queued"] == len(ids) * (WORKERS - 1)
    assert len(mail.outbox) == 3
    assert Notification.objects.filter(status="sent").count() == len(ids)
    assert NotificationAttempt.objects.count() == len(ids)
