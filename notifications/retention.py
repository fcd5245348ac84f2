"""What notifications keep (``common.retention``): a notification in a final state with its
attempts, transitions and inbox item; one still queued, sending or failing is never pruned."""

from __future__ import annotations

from django.db.models import Q

from common.retention import Retention, retention_register
from notifications.states import NOTIFICATION_TERMINAL


def notifications_retention_register() -> None:
    retention_register(
        Retention(
            "notifications.Notification",
            "RETENTION_NOTIFICATIONS_DAYS",
            "created_at",
            prunable=Q(status__in=sorted(NOTIFICATION_TERMINAL)),
            children=(
                "notifications.NotificationAttempt",
                "notifications.NotificationTransition",
                "notifications.InboxItem",
            ),
        )
    )
