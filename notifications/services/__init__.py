"""Every write and business decision of the notification pipeline; the hand-off contract
(``notification_schedule`` + ``Attachment``) is what the scheduler's handlers call."""

from notifications.channels.base import Attachment
from notifications.services.deliver import DeliveryOutcome, notification_deliver, retry_delay_s
from notifications.services.inbox import InboxItemNotFound, inbox_item_mark_read
from notifications.services.operators import dead_letter_notify_operators
from notifications.services.recipients import (
    RECIPIENT_POLICIES,
    operators_resolve,
    recipients_chosen,
    recipients_resolve,
)
from notifications.services.render import Rendered, RenderError, notification_render
from notifications.services.schedule import notification_schedule, notifications_create
from notifications.services.support import (
    NotificationNotFound,
    notification_cancel,
    notification_retry,
)
from notifications.services.sweep import SweepResult, notifications_sweep

__all__ = [
    "RECIPIENT_POLICIES",
    "Attachment",
    "DeliveryOutcome",
    "InboxItemNotFound",
    "NotificationNotFound",
    "RenderError",
    "Rendered",
    "SweepResult",
    "dead_letter_notify_operators",
    "inbox_item_mark_read",
    "notification_cancel",
    "notification_deliver",
    "notification_render",
    "notification_retry",
    "notification_schedule",
    "notifications_create",
    "notifications_sweep",
    "operators_resolve",
    "recipients_chosen",
    "recipients_resolve",
    "retry_delay_s",
]
