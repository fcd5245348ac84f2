"""Delivery channels behind one interface (``base``); importing this package registers the
built-in ones (email, webhook, inbox)."""

from notifications.channels import email, inbox, webhook  # noqa: F401  (they register)
from notifications.channels.base import (
    Attachment,
    Delivery,
    NotificationChannel,
    Recipient,
    SendResult,
    channel_get,
    channel_names,
    channel_override,
    channel_register,
)

__all__ = [
    "Attachment",
    "Delivery",
    "NotificationChannel",
    "Recipient",
    "SendResult",
    "channel_get",
    "channel_names",
    "channel_override",
    "channel_register",
]
