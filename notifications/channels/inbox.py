"""The in-app inbox: a row the user lists and marks read. One row per notification (a
one-to-one key), so a repeated send finds the row instead of adding one."""

from __future__ import annotations

from typing import ClassVar

from django.utils import timezone

from notifications.channels.base import (
    Delivery,
    NotificationChannel,
    Recipient,
    SendResult,
    channel_register,
)
from notifications.models import InboxItem
from notifications.states import Channel, NotificationReason


class InboxChannel(NotificationChannel):
    name: ClassVar[str] = Channel.INBOX

    def unreachable(self, recipient: Recipient) -> tuple[NotificationReason, str] | None:
        if recipient.user_id is None:
            return NotificationReason.CHANNEL_UNSUPPORTED, "the inbox is for users only"
        return None

    def send(self, delivery: Delivery) -> SendResult:
        if delivery.user_id is None:
            return SendResult.permanent(
                "the recipient's user is gone", reason=NotificationReason.RECIPIENT_GONE
            )
        InboxItem.objects.get_or_create(
            notification_id=delivery.notification_id,
            defaults={
                "user_id": delivery.user_id,
                "farm_id": delivery.farm_id,
                "subject": delivery.subject,
                "body": delivery.body,
                "created_at": timezone.now(),
            },
        )
        return SendResult.sent()


channel_register(InboxChannel())
