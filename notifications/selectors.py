"""Reads of the notification pipeline: a user's inbox, a source's notifications and one
notification's history (what support looks at)."""

from __future__ import annotations

from django.db.models import QuerySet

from notifications.models import (
    InboxItem,
    Notification,
    NotificationAttempt,
    NotificationTransition,
)


def inbox_items_for(*, user_id: int, unread_only: bool = False) -> QuerySet[InboxItem]:
    items = InboxItem.objects.filter(user_id=user_id)
    if unread_only:
        items = items.filter(read_at__isnull=True)
    return items.order_by("-created_at", "-pk")


def notifications_for_source(*, source_key: str) -> QuerySet[Notification]:
    return Notification.objects.filter(source_key=source_key).order_by("pk")


def notification_attempts(*, notification_id: int) -> QuerySet[NotificationAttempt]:
    return NotificationAttempt.objects.filter(notification_id=notification_id).order_by("attempt")


def notification_timeline(*, notification_id: int) -> QuerySet[NotificationTransition]:
    return NotificationTransition.objects.filter(notification_id=notification_id).order_by(
        "at", "pk"
    )
