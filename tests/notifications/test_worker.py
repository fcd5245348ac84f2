"""The hand-off and delivery through the configured broker with an in-process worker on the
``notify`` queue: hand-offs run three times and every delivery task sent three times still
leave one email, one webhook call and one inbox row per recipient and channel."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from django.core import mail

from config.celery import app as celery_app
from config.task_names import NOTIFICATION_DELIVER
from devtools.runtime import in_process_worker
from notifications.models import InboxItem, Notification
from notifications.services import notification_schedule
from notifications.states import NOTIFICATION_TERMINAL
from tests.waiting import wait_for

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def worker() -> Iterator[None]:
    with celery_app.connection_for_write() as conn:
        conn.default_channel.queue_purge("notify")  # stale messages of earlier runs
    with in_process_worker(concurrency=4):
        yield


def test_repeated_hand_offs_and_redelivered_tasks_send_once_through_a_real_worker(
    hooked, due_template, webhook_server, worker
):
    for _ in range(3):
        coordinates = notification_schedule(
            source_key="reminder:worker-test",
            farm_id=hooked.farm.pk,
            recipient_policy="everyone",
            template_name=due_template,
            channels=["email", "webhook", "inbox"],
            context={
                "title": "Feed",
                "who": "all",
                "due_on": hooked.farm.created_at.date(),
                "due_at": hooked.farm.created_at,
            },
        )
        for c in coordinates:  # the broker delivers each task again
            celery_app.send_task(NOTIFICATION_DELIVER, args=[c["notification_id"]])
    ids = [c["notification_id"] for c in coordinates]

    def all_final() -> bool:
        statuses = Notification.objects.filter(pk__in=ids).values_list("status", flat=True)
        return all(s in NOTIFICATION_TERMINAL for s in statuses)

    wait_for(all_final, "every notification final")
    time.sleep(0.3)  # late duplicates, if any, would land now
    users = [hooked.owner, hooked.manager, hooked.worker]
    assert sorted(m.to[0] for m in mail.outbox) == sorted(
        [u.email for u in users] + [hooked.vet.email]
    )
    assert len(webhook_server.calls) == 1 and webhook_server.calls[0].verified
    assert InboxItem.objects.count() == len(users)
    assert Notification.objects.filter(status="sent").count() == 2 * len(users) + 2
