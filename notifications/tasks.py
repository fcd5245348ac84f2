"""Celery tasks of the notification pipeline (queue ``notify``): take ids, call one service.

Backoff lives in ``Notification.next_attempt_at``, swept by beat, never in a countdown; a
redelivered deliver task finds its row no longer queued and does nothing.
"""

from __future__ import annotations

from celery import shared_task
from django.utils import timezone

from config.celery import DB_RETRY, routed_to
from config.task_names import ALARMS_NOTIFY, NOTIFICATION_DELIVER, NOTIFICATIONS_SWEEP
from notifications.services.alarms import alarms_notify
from notifications.services.deliver import notification_deliver
from notifications.services.sweep import notifications_sweep


@shared_task(
    name=NOTIFICATION_DELIVER,
    **routed_to("notify", soft_time_limit=90, time_limit=110),
    **DB_RETRY,
)
def notification_deliver_task(notification_id: int) -> str:
    return str(notification_deliver(notification_id=notification_id))


def _enqueue(notification_id: int) -> None:
    notification_deliver_task.apply_async(args=[notification_id])


@shared_task(name=NOTIFICATIONS_SWEEP, **routed_to("notify"))
def notifications_sweep_task() -> int:
    """Recover lost claims and queue one delivery task per due notification."""
    result = notifications_sweep(now=timezone.now(), enqueue=_enqueue)
    return result.requeued + result.failed + result.enqueued


@shared_task(
    name=ALARMS_NOTIFY,
    **routed_to("notify", soft_time_limit=120, time_limit=150),
    **DB_RETRY,
)
def alarms_notify_task() -> int:
    """Hand off the due alarm notifications and repeats, one bounded batch."""
    return alarms_notify(now=timezone.now())
