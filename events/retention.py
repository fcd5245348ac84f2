"""What the event bus keeps (``common.retention``): the delivered inbox, whose rows absorb a
redelivered event, for its retention; dead letters stay until handled."""

from __future__ import annotations

from common.retention import Retention, retention_register


def events_retention_register() -> None:
    retention_register(Retention("events.EventInbox", "RETENTION_EVENT_INBOX_DAYS", "processed_at"))
