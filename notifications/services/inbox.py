"""The user's side of the in-app inbox."""

from __future__ import annotations

from datetime import datetime

from django.utils import timezone

from notifications.models import InboxItem


class InboxItemNotFound(LookupError):
    """No such item for this user (another user's item is reported the same way)."""


def inbox_item_mark_read(*, user_id: int, item_id: int, now: datetime | None = None) -> InboxItem:
    """Mark read once: a second call keeps the first ``read_at``."""
    now = now or timezone.now()
    InboxItem.objects.filter(pk=item_id, user_id=user_id, read_at__isnull=True).update(read_at=now)
    item = InboxItem.objects.filter(pk=item_id, user_id=user_id).first()
    if item is None:
        raise InboxItemNotFound(f"no inbox item {item_id}")
    return item
