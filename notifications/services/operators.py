"""Operators hear about platform trouble through the same pipeline: a dead letter becomes a
notification (email and inbox) to every operator, keyed ``dead-letter:<id>`` so a repeated
alert sends nothing new."""

from __future__ import annotations

from datetime import datetime

from django.db import transaction
from django.utils import timezone

from events.registry import DeadLetterAlert
from notifications.services.recipients import operators_resolve
from notifications.services.schedule import NotificationCoordinates, notifications_create
from notifications.states import Channel

DEAD_LETTER_TEMPLATE = "operator_dead_letter"
OPERATOR_CHANNELS = (Channel.EMAIL, Channel.INBOX)


def dead_letter_notify_operators(
    *, alert: DeadLetterAlert, now: datetime | None = None
) -> list[NotificationCoordinates]:
    """One notification per operator and channel for the dead letter ``alert`` names."""
    now = now or timezone.now()
    with transaction.atomic():
        return notifications_create(
            source_key=f"dead-letter:{alert.dead_letter_id}",
            farm=None,
            recipients=operators_resolve(),
            recipient_policy="operators",
            template_name=DEAD_LETTER_TEMPLATE,
            channels=[str(c) for c in OPERATOR_CHANNELS],
            context={
                "dead_letter_id": alert.dead_letter_id,
                "event_type": alert.event_type,
                "idempotency_key": alert.idempotency_key,
                "handler": alert.handler,
                "reason": alert.reason,
                "attempts": alert.attempts,
                "last_error": alert.last_error[-2000:],
                "dead_lettered_at": now,
            },
            now=now,
        )
