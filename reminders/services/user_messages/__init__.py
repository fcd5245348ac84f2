"""Users' scheduled messages: ``schedule`` (occurrences, no database), ``rows`` (the scheduler
rows follow the message), ``write`` (create, edit, cancel, beat's ensure), ``due`` (the row
at due time and the hand-off to notifications)."""

from reminders.services.user_messages.write import (
    UserMessageCancelled,
    UserMessageInvalid,
    user_message_cancel,
    user_message_create,
    user_message_ensure,
    user_message_update,
    user_messages_ensure_due,
)

__all__ = [
    "UserMessageCancelled",
    "UserMessageInvalid",
    "user_message_cancel",
    "user_message_create",
    "user_message_ensure",
    "user_message_update",
    "user_messages_ensure_due",
]
