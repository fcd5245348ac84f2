"""Reads of the notification pipeline: a user's inbox."""

from __future__ import annotations

from django.db.models import QuerySet

from notifications.models import InboxItem


def inbox_items_for(*, user_id: int, unread_only: bool = False) -> QuerySet[InboxItem]:
    items = InboxItem.objects.filter(user_id=user_id)
    if unread_only:
        items = items.filter(read_at__isnull=True)
    return items.order_by("-created_at", "-pk")
