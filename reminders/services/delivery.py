"""The hand-off to the notification pipeline (docs/spec.md §6): the scheduler queues deliveries, it
never sends. ``notification_schedule`` is idempotent per (source key, recipient, channel) and
the source key is the scheduler row's key, so a retried or re-claimed row queues nothing
twice. Recipients and channels are resolved there, at execution time."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.conf import settings
from django.template import TemplateDoesNotExist
from django.template.loader import get_template

from notifications.states import Channel
from reminders.models import RecipientsPolicy
from scheduler.registry import HandlerResult, PermanentFailure
from scheduler.states import SchedulerReason

TEMPLATE_PARTS = ("subject.txt", "body.txt")


@dataclass(frozen=True)
class ReportAttachment:
    filename: str
    content_type: str
    content: str


def notification_hand_off(
    *,
    source_key: str,
    farm_id: int,
    recipient_policy: str,
    template_name: str,
    channels: Sequence[str],
    context: Mapping[str, Any],
    now: datetime,
    attachments: Sequence[ReportAttachment] = (),
) -> HandlerResult:
    from notifications.services import Attachment, notification_schedule

    queued = notification_schedule(
        source_key=source_key,
        farm_id=farm_id,
        recipient_policy=recipient_policy,
        template_name=template_name,
        channels=list(channels),
        context=dict(context),
        attachments=[Attachment(a.filename, a.content_type, a.content) for a in attachments],
        now=now,
    )
    return notifications_handed(queued)


def notifications_handed(queued: Sequence[Mapping[str, Any]]) -> HandlerResult:
    """Small coordinates for DispatchResultJson, and the full answer for the trace blob."""
    return HandlerResult(coordinates=coordinates_compact(queued), trace={"notifications": queued})


def coordinates_compact(queued: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The count and as many leading coordinates as fit half the row's budget (a farm with
    many members queues many notifications; the full list goes to the trace)."""
    budget = settings.SCHEDULER_RESULT_MAX_BYTES // 2
    kept: list[Mapping[str, Any]] = []
    for item in queued:
        if len(json.dumps([*kept, item], default=str)) > budget:
            break
        kept.append(item)
    return {"queued": len(queued), "notifications": kept}


def delivery_check(*, template_name: str, channels: Sequence[str], recipient_policy: str) -> None:
    """Execution-time check of what the pending row did not store: a missing template or
    an unknown channel or policy is a configuration error, not worth retrying."""
    for part in TEMPLATE_PARTS:
        try:
            get_template(f"notifications/{template_name}/{part}")
        except TemplateDoesNotExist:
            raise PermanentFailure(
                f"template notifications/{template_name}/{part} is missing",
                reason=SchedulerReason.HANDLER_ERROR,
            ) from None
    bad = [c for c in channels if c not in Channel.values]
    if not channels or bad:
        raise PermanentFailure(f"channels {list(channels)!r} are not deliverable")
    if recipient_policy not in RecipientsPolicy.values:
        raise PermanentFailure(f"recipient policy {recipient_policy!r} is unknown")
