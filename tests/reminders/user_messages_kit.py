"""Helpers of the user-message tests: a message with defaults, its rows by sequence."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date, datetime, time
from typing import Any

from devices.models import Farm
from reminders.models import UserMessage, UserMessageOccurrence
from reminders.services.user_messages import user_message_create
from scheduler.models import DueWork
from tests.reminders.conftest import NOW


def message(farm: Farm, **overrides: Any) -> UserMessage:
    fields: dict[str, Any] = {
        "farm_id": farm.pk,
        "subject": "Gate",
        "text": "Close the north gate tonight.",
        "channels": ["email"],
        "starts_on": date(2026, 3, 3),
        "send_time": time(9, 0),
        "recipients_policy": "external_contacts",
        "now": NOW,
    }
    fields.update(overrides)
    return user_message_create(**fields)


@dataclass(frozen=True)
class MessageRow:
    sequence: int
    pk: int
    key_time: str  # the key's UTC stamp
    status: str
    scheduled_on: datetime
    reason: str


def rows(msg: UserMessage) -> list[MessageRow]:
    """Every scheduler row of the message, by sequence; also checks the link is in step."""
    links = list(UserMessageOccurrence.objects.filter(message=msg).order_by("sequence"))
    found = {r.pk: r for r in DueWork.objects.filter(pk__in=[x.scheduler_id for x in links])}
    out = []
    for link in links:
        row = found[link.scheduler_id]
        assert row.scheduler_key == link.scheduler_key
        out.append(
            MessageRow(
                link.sequence,
                row.pk,
                row.scheduler_key.split(":", 2)[2],
                row.status,
                row.scheduled_on,
                row.failure_reason_code,
            )
        )
    return out
