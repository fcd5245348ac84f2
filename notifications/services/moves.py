"""The one way a notification changes status: a compare-and-set on (status, version) that
writes its transition row in the same transaction. Zero rows changed means someone else moved
it first: nothing is written and the caller stops."""

from __future__ import annotations

import logging
from datetime import datetime
from typing import Any

from django.db import transaction
from django.db.models import F

from notifications.models import Notification, NotificationTransition
from notifications.states import (
    NOTIFICATION_TERMINAL,
    NotificationReason,
    NotificationStatus,
    notification_can_move,
)

logger = logging.getLogger(__name__)

DETAIL_MAX_CHARS = 500


def notification_move(
    notification: Notification,
    to: NotificationStatus,
    reason: NotificationReason,
    *,
    now: datetime,
    detail: str = "",
    actor: str = "",
    **fields: Any,
) -> bool:
    """Move ``notification`` from the status and version it was read with; False if it moved
    meanwhile. Updates the instance in place on success."""
    if not notification_can_move(notification.status, to):
        return False
    updates: dict[str, Any] = {
        "status": to,
        "status_reason": reason,
        "status_detail": detail[:DETAIL_MAX_CHARS],
        "updated_at": now,
        **fields,
    }
    if to in NOTIFICATION_TERMINAL:
        updates.setdefault("lease_expires_at", None)
        updates.setdefault("next_attempt_at", None)
    with transaction.atomic():
        moved = Notification.objects.filter(
            pk=notification.pk, status=notification.status, version=notification.version
        ).update(version=F("version") + 1, **updates)
        if moved != 1:
            return False
        NotificationTransition.objects.create(
            notification_id=notification.pk,
            from_status=notification.status,
            to_status=to,
            reason=reason,
            detail=detail[:DETAIL_MAX_CHARS],
            actor=actor[:150],
            attempt=updates.get("attempt_count", notification.attempt_count),
            at=now,
        )
        for name, value in updates.items():
            setattr(notification, name, value)
        notification.version += 1
    logger.info(
        "notification %s -> %s (%s)",
        notification.pk,
        to,
        reason,
        extra={"notificationId": notification.pk, "sourceKey": notification.source_key},
    )
    return True


def notification_touch(notification: Notification, *, now: datetime, **fields: Any) -> bool:
    """Compare-and-set of non-status fields (the rendered text) on the version read."""
    moved = Notification.objects.filter(
        pk=notification.pk, status=notification.status, version=notification.version
    ).update(version=F("version") + 1, updated_at=now, **fields)
    if moved != 1:
        return False
    for name, value in fields.items():
        setattr(notification, name, value)
    notification.version += 1
    notification.updated_at = now
    return True
