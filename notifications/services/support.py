"""What support does to one notification: retry (a fresh attempt budget, re-rendered if a
template was at fault) or cancel, each with who and why in the transition row."""

from __future__ import annotations

from datetime import datetime

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from common.handoff import notifications_deliver_on_commit
from notifications.models import Notification
from notifications.services.moves import NotificationFields, notification_move
from notifications.states import (
    NOTIFICATION_CANCELLABLE,
    NOTIFICATION_RETRYABLE,
    TEMPLATE_REASONS,
    NotificationReason,
    NotificationStatus,
)


class NotificationNotFound(LookupError):
    pass


def _get(notification_id: int) -> Notification:
    notification = Notification.objects.filter(pk=notification_id).first()
    if notification is None:
        raise NotificationNotFound(f"no notification {notification_id}")
    return notification


def notification_retry(
    *, notification_id: int, actor: str, reason: str, now: datetime | None = None
) -> bool:
    """Queue a failed or cancelled notification again with a fresh attempt budget; False when
    it is not in a retryable state (or moved meanwhile)."""
    now = now or timezone.now()
    notification = _get(notification_id)
    if notification.status not in NOTIFICATION_RETRYABLE:
        return False
    fields: NotificationFields = {
        "max_attempts": notification.attempt_count + int(settings.NOTIFY_MAX_ATTEMPTS),
        "next_attempt_at": None,
        "lease_expires_at": None,
    }
    if notification.status_reason in TEMPLATE_REASONS:
        fields |= {"subject": "", "body": "", "body_html": "", "rendered_at": None}
    with transaction.atomic():
        moved = notification_move(
            notification,
            NotificationStatus.QUEUED,
            NotificationReason.SUPPORT_RETRY,
            now=now,
            detail=reason,
            actor=actor,
            **fields,
        )
        if moved:
            notifications_deliver_on_commit([notification.pk])
    return moved


def notification_cancel(
    *, notification_id: int, actor: str, reason: str, now: datetime | None = None
) -> bool:
    """Stop a queued (or failed) notification for good; False when it is being sent, already
    sent, or in no state to cancel."""
    now = now or timezone.now()
    notification = _get(notification_id)
    if notification.status not in NOTIFICATION_CANCELLABLE:
        return False
    return notification_move(
        notification,
        NotificationStatus.CANCELLED,
        NotificationReason.SUPPORT_CANCELLED,
        now=now,
        detail=reason,
        actor=actor,
    )
