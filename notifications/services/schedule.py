"""The hand-off: the scheduler (or any source) names what happened, to whom by policy, and on
which channels; this creates one Notification per (source key, recipient, channel) and queues
delivery after commit. The unique triple makes a re-run hand-off, a retried task or a replayed
event find the existing rows instead of sending twice."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict
from datetime import datetime
from typing import TypedDict

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from common.handoff import notifications_deliver_on_commit
from common.ledger import Step, ledger_created
from common.sql import insert_ignore_returning
from devices.models import Farm
from notifications.channels import Attachment, Recipient, channel_get
from notifications.models import (
    RECIPIENT_KEY_MAX_LENGTH,
    SOURCE_KEY_MAX_LENGTH,
    Notification,
    NotificationProfile,
)
from notifications.services.context import ContextValue, context_encode
from notifications.services.moves import DETAIL_MAX_CHARS, NOTIFICATIONS
from notifications.services.recipients import (
    ChannelChoice,
    channel_choices,
    recipients_resolve,
)
from notifications.services.render import template_name_validate
from notifications.states import NotificationReason, NotificationStatus


class NotificationCoordinates(TypedDict):
    """One row of a hand-off, as the scheduler's DispatchResultJson and trace keep it."""

    notification_id: int
    recipient: str
    channel: str
    status: str


def notification_schedule(
    *,
    source_key: str,
    farm_id: int,
    recipient_policy: str,
    template_name: str,
    channels: Sequence[str],
    context: Mapping[str, ContextValue],
    attachments: Sequence[Attachment] = (),
    now: datetime | None = None,
) -> list[NotificationCoordinates]:
    """One Notification per (source_key, recipient, channel) — the unique idempotency key —
    queued for delivery after commit. Returns small coordinates for the scheduler's
    DispatchResultJson: [{"notification_id", "recipient", "channel", "status"}]."""
    farm = Farm.objects.get(pk=farm_id)
    recipients = recipients_resolve(farm=farm, policy=recipient_policy)
    return notifications_create(
        source_key=source_key,
        farm=farm,
        recipients=recipients,
        recipient_policy=recipient_policy,
        template_name=template_name,
        channels=channels,
        context=context,
        attachments=attachments,
        now=now,
    )


def farm_locale(farm: Farm | None) -> str:
    """The farm's locale (NotificationProfile), else the project's LANGUAGE_CODE."""
    if farm is not None:
        locale = (
            NotificationProfile.objects.filter(farm=farm).values_list("locale", flat=True).first()
        )
        if locale:
            return str(locale)
    return str(settings.NOTIFY_DEFAULT_LOCALE)


def notifications_create(
    *,
    source_key: str,
    farm: Farm | None,
    recipients: Sequence[Recipient],
    recipient_policy: str,
    template_name: str,
    channels: Sequence[str],
    context: Mapping[str, ContextValue],
    attachments: Sequence[Attachment] = (),
    now: datetime | None = None,
) -> list[NotificationCoordinates]:
    """Insert the rows for already resolved ``recipients`` (ignoring existing ones) and queue
    the new queued rows after commit. Validates everything before writing anything."""
    now = now or timezone.now()
    if not source_key or len(source_key) > SOURCE_KEY_MAX_LENGTH:
        raise ValueError(f"source_key must be 1..{SOURCE_KEY_MAX_LENGTH} characters")
    template_name_validate(template_name)
    handlers = {name: channel_get(name) for name in dict.fromkeys(channels)}
    stored_context = context_encode(context)
    stored_attachments = [asdict(a) for a in attachments]
    choices = channel_choices(recipients, handlers)
    common = {
        "source_key": source_key,
        "farm": farm.pk if farm is not None else None,
        "recipient_policy": recipient_policy[:32],
        "template_name": template_name,
        "context": stored_context,
        "locale": farm_locale(farm),
        "time_zone": farm.time_zone if farm is not None else "UTC",
        "max_attempts": int(settings.NOTIFY_MAX_ATTEMPTS),
        "created_at": now,
        "updated_at": now,
    }
    rows = []
    for recipient in recipients:
        if len(recipient.key) > RECIPIENT_KEY_MAX_LENGTH:
            raise ValueError(f"recipient key {recipient.key!r} is too long")
        for name, handler in handlers.items():
            status, reason, detail = _initial_status(
                handler.unreachable(recipient), choices.get((recipient.key, name))
            )
            rows.append(
                {
                    **common,
                    "recipient_key": recipient.key,
                    "channel": name,
                    "user": recipient.user_id,
                    "contact": recipient.contact_id,
                    "address": handler.address(recipient),
                    "attachments": stored_attachments if handler.carries_attachments else [],
                    "status": status,
                    "status_reason": reason,
                    "status_detail": detail[:500],
                }
            )
    with transaction.atomic():
        inserted = insert_ignore_returning(Notification, rows, ("id", "status", "status_reason"))
        detail = f"hand-off from {source_key}"[:DETAIL_MAX_CHARS]
        ledger_created(
            NOTIFICATIONS,
            [
                (pk, Step(status, {"reason": reason, "detail": detail}))
                for pk, status, reason in inserted
            ],
            now=now,
        )
        notifications_deliver_on_commit(
            [pk for pk, status, _ in inserted if status == NotificationStatus.QUEUED]
        )
    return notification_coordinates(
        source_key=source_key,
        recipient_keys=[r.key for r in recipients],
        channels=list(handlers),
    )


def _initial_status(
    unreachable: tuple[NotificationReason, str] | None, choice: ChannelChoice | None
) -> tuple[str, str, str]:
    """Queued, or skipped with the reason a person can read later."""
    if unreachable is not None:
        reason, detail = unreachable
        return NotificationStatus.SKIPPED, reason, detail
    if choice is not None and choice.skip_reason is not None:
        return NotificationStatus.SKIPPED, choice.skip_reason, choice.detail
    return NotificationStatus.QUEUED, NotificationReason.QUEUED, ""


def notification_coordinates(
    *, source_key: str, recipient_keys: Sequence[str], channels: Sequence[str]
) -> list[NotificationCoordinates]:
    """The rows of one hand-off as small coordinates, in a stable order."""
    rows = (
        Notification.objects.filter(
            source_key=source_key, recipient_key__in=recipient_keys, channel__in=channels
        )
        .order_by("pk")
        .values_list("pk", "recipient_key", "channel", "status")
    )
    return [
        NotificationCoordinates(notification_id=pk, recipient=key, channel=channel, status=status)
        for pk, key, channel, status in rows
    ]
