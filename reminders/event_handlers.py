"""Reminder handlers on the event bus (the post-processor seam of docs/spec.md §5). Auto-loaded by
the events app; each handler parses the payload, then runs the source flow, which reloads the
source rather than trusting the payload. The bus runs each once per idempotency key."""

from __future__ import annotations

import uuid

from django.utils import timezone

from events.envelope import Envelope
from events.event_types import DOCUMENT_CHANGED
from events.registry import EventRejected, event_handler
from reminders.event_types import ENDPOINT_METRIC_CHANGED, REMINDER_SETTING_CHANGED
from reminders.models import SourceType
from reminders.services.handlers import reminder_source_changed
from reminders.services.settings import reminder_setting_apply


def _guid(event: Envelope, name: str) -> uuid.UUID:
    try:
        return uuid.UUID(str(event.payload[name]))
    except (KeyError, ValueError):
        raise EventRejected(f"{event.type}: {name} is not a guid") from None


def _source_changed(event: Envelope, source_type: SourceType, guid_field: str) -> None:
    reminder_source_changed(
        source_type=source_type, source_guid=_guid(event, guid_field), now=timezone.now()
    )


@event_handler(DOCUMENT_CHANGED, name="reminders.document_changed")
def document_changed(event: Envelope) -> None:
    """Re-derive the document's expiry reminders: old rows deactivated first, then ensured."""
    _source_changed(event, SourceType.DOCUMENT, "document_id")


@event_handler(ENDPOINT_METRIC_CHANGED, name="reminders.endpoint_metric_changed")
def endpoint_metric_changed(event: Envelope) -> None:
    """Re-evaluate the metric source's threshold reminders with its new configuration."""
    _source_changed(event, SourceType.ENDPOINT_METRIC, "source_id")


@event_handler(REMINDER_SETTING_CHANGED, name="reminders.reminder_setting_changed")
def reminder_setting_changed(event: Envelope) -> None:
    """Apply a setting change to its rows (recreate, move in place, or leave alone)."""
    reminder_setting_apply(
        setting_guid=_guid(event, "setting_id"),
        changed_fields=list(event.payload.get("changed_fields", [])),
        now=timezone.now(),
    )
