"""Delivery: claim (queued -> sending, compare-and-set on version), render once, send outside
any transaction, record the attempt, then sent / failed / queued again with ``next_attempt_at``.
A redelivered task finds the row no longer queued (or not yet due) and does nothing; a worker
lost while ``sending`` is recovered by the sweep after its lease."""

from __future__ import annotations

import logging
import random
import time
from datetime import datetime, timedelta
from enum import StrEnum

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from notifications.channels import Attachment, Delivery, SendResult, channel_get
from notifications.models import Notification, NotificationAttempt
from notifications.services.context import ContextValue, context_decode, context_plain
from notifications.services.moves import notification_move, notification_touch
from notifications.services.recipients import channel_choice
from notifications.services.render import RenderError, notification_render
from notifications.states import AttemptOutcome, NotificationReason, NotificationStatus

logger = logging.getLogger(__name__)

ERROR_MAX_CHARS = 2000
RETRY_JITTER_RATIO = 0.1


class DeliveryOutcome(StrEnum):
    SENT = "sent"
    RETRY_SCHEDULED = "retry_scheduled"
    FAILED = "failed"
    SKIPPED = "skipped"
    NOT_QUEUED = "not_queued"  # already claimed, sent or cancelled: a duplicate task
    NOT_DUE = "not_due"
    MISSING = "missing"
    LOST = "lost"  # the lease expired and someone else took the row over


def notification_deliver(*, notification_id: int, now: datetime | None = None) -> DeliveryOutcome:
    """Deliver one notification at most once per claim. ``now`` pins every timestamp (tests)."""
    notification = Notification.objects.filter(pk=notification_id).first()
    if notification is None:
        return DeliveryOutcome.MISSING
    at = now or timezone.now()
    if notification.status != NotificationStatus.QUEUED:
        return DeliveryOutcome.NOT_QUEUED
    if notification.next_attempt_at is not None and notification.next_attempt_at > at:
        return DeliveryOutcome.NOT_DUE
    choice = channel_choice(recipient_key=notification.recipient_key, channel=notification.channel)
    if choice.skip_reason is not None:
        moved = notification_move(
            notification,
            NotificationStatus.SKIPPED,
            choice.skip_reason,
            now=at,
            detail=choice.detail,
        )
        return DeliveryOutcome.SKIPPED if moved else DeliveryOutcome.NOT_QUEUED
    attempt = notification.attempt_count + 1
    claimed = notification_move(
        notification,
        NotificationStatus.SENDING,
        NotificationReason.CLAIMED,
        now=at,
        detail=f"attempt {attempt}",
        attempt_count=attempt,
        next_attempt_at=None,
        lease_expires_at=at + timedelta(seconds=float(settings.NOTIFY_LEASE_S)),
    )
    if not claimed:
        return DeliveryOutcome.NOT_QUEUED
    started = time.monotonic()
    try:
        if not _ensure_rendered(notification, now=at):
            return DeliveryOutcome.LOST
    except RenderError as exc:
        result = SendResult.permanent(exc.detail, reason=exc.reason)
        return _finish(notification, result, attempt=attempt, started=started, now=now, at=at)
    result = _send(notification, attempt)
    return _finish(notification, result, attempt=attempt, started=started, now=now, at=at)


def _ensure_rendered(notification: Notification, *, now: datetime) -> bool:
    """Render once; retries send the same text (support retry of a template failure clears it).
    False when the claim was lost meanwhile: then nothing may be sent."""
    if notification.rendered_at is not None:
        return True
    rendered = notification_render(
        template_name=notification.template_name,
        context=_render_context(notification),
        locale=notification.locale,
        time_zone=notification.time_zone,
    )
    return notification_touch(
        notification,
        now=now,
        subject=rendered.subject,
        body=rendered.body,
        body_html=rendered.body_html,
        rendered_at=now,
    )


def _render_context(notification: Notification) -> dict[str, ContextValue]:
    decoded = context_decode(notification.context)
    context = decoded if isinstance(decoded, dict) else {}
    context.setdefault("recipient_key", notification.recipient_key)
    return context


def _send(notification: Notification, attempt: int) -> SendResult:
    """The channel call: any exception it leaks is a transient error, never a lost row."""
    plain = context_plain(notification.context)
    delivery = Delivery(
        notification_id=notification.pk,
        source_key=notification.source_key,
        recipient_key=notification.recipient_key,
        channel=notification.channel,
        address=notification.address,
        user_id=notification.user_id,
        contact_id=notification.contact_id,
        farm_id=notification.farm_id,
        template_name=notification.template_name,
        subject=notification.subject,
        body=notification.body,
        body_html=notification.body_html,
        context=plain if isinstance(plain, dict) else {},
        attempt=attempt,
        attachments=tuple(Attachment(**a) for a in notification.attachments or ()),
    )
    try:
        return channel_get(notification.channel).send(delivery)
    except ValueError as exc:  # no such channel (any more)
        return SendResult.permanent(str(exc), reason=NotificationReason.CHANNEL_UNSUPPORTED)
    except Exception as exc:
        logger.exception(
            "notification %s: channel %s raised", notification.pk, notification.channel
        )
        return SendResult.transient(f"{type(exc).__name__}: {exc}")


def retry_delay_s(attempt: int, retry_after_s: float | None = None) -> float:
    """Backoff after attempt ``attempt`` (1-based) with a little jitter, never sooner than the
    receiver's Retry-After (capped)."""
    ladder = settings.NOTIFY_BACKOFF_S
    base = float(ladder[min(max(attempt, 1), len(ladder)) - 1])
    delay = base * random.uniform(1 - RETRY_JITTER_RATIO, 1 + RETRY_JITTER_RATIO)
    if retry_after_s is not None:
        delay = max(delay, min(retry_after_s, float(settings.NOTIFY_RETRY_AFTER_MAX_S)))
    return delay


def _finish(
    notification: Notification,
    result: SendResult,
    *,
    attempt: int,
    started: float,
    now: datetime | None,
    at: datetime,
) -> DeliveryOutcome:
    """Record the attempt and move the row, in one transaction; the move only matches while
    our claim (status sending, version) still holds."""
    latency_ms = int((time.monotonic() - started) * 1000)
    done = now or timezone.now()
    error = result.error[:ERROR_MAX_CHARS]
    with transaction.atomic():
        NotificationAttempt.objects.get_or_create(
            notification_id=notification.pk,
            attempt=attempt,
            defaults={
                "started_at": at,
                "latency_ms": latency_ms,
                "status_code": result.status_code,
                "error": error,
                "outcome": result.outcome,
            },
        )
        outcome, moved = _move_after(notification, result, attempt=attempt, now=done, error=error)
    if not moved:
        logger.warning(
            "notification %s: claim lost before attempt %s finished", notification.pk, attempt
        )
        return DeliveryOutcome.LOST
    return outcome


def _move_after(
    notification: Notification, result: SendResult, *, attempt: int, now: datetime, error: str
) -> tuple[DeliveryOutcome, bool]:
    if result.outcome == AttemptOutcome.SENT:
        moved = notification_move(
            notification,
            NotificationStatus.SENT,
            NotificationReason.DELIVERED,
            now=now,
            detail=f"attempt {attempt}" + (f": {result.status_code}" if result.status_code else ""),
            sent_at=now,
            last_error="",
        )
        return DeliveryOutcome.SENT, moved
    if result.outcome == AttemptOutcome.PERMANENT_ERROR:
        moved = notification_move(
            notification,
            NotificationStatus.FAILED,
            result.reason or NotificationReason.PERMANENT_ERROR,
            now=now,
            detail=error,
            last_error=error,
        )
        return DeliveryOutcome.FAILED, moved
    if attempt >= notification.max_attempts:
        moved = notification_move(
            notification,
            NotificationStatus.FAILED,
            NotificationReason.RETRY_BUDGET_EXHAUSTED,
            now=now,
            detail=f"{attempt} attempts; last: {error}",
            last_error=error,
        )
        return DeliveryOutcome.FAILED, moved
    next_at = now + timedelta(seconds=retry_delay_s(attempt, result.retry_after_s))
    moved = notification_move(
        notification,
        NotificationStatus.QUEUED,
        NotificationReason.TRANSIENT_ERROR,
        now=now,
        detail=error,
        last_error=error,
        next_attempt_at=next_at,
        lease_expires_at=None,
    )
    return DeliveryOutcome.RETRY_SCHEDULED, moved
