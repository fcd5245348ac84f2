"""The one way a notification changes status: a compare-and-set on (status, version) that
writes its transition row in the same transaction. Zero rows changed means someone else moved
it first: nothing is written and the caller stops."""

from __future__ import annotations

import logging
from datetime import datetime
from typing import TypedDict, Unpack

from django.db import transaction

from common.sql import row_compare_and_set
from notifications.models import Notification, NotificationTransition
from notifications.states import (
    NOTIFICATION_TERMINAL,
    NotificationReason,
    NotificationStatus,
    notification_can_move,
)

logger = logging.getLogger(__name__)

DETAIL_MAX_CHARS = 500


class NotificationFields(TypedDict, total=False):
    """The columns a move or touch sets beside status, reason and version: the one list of
    them, so a typo or a value of the wrong type is a type error, not a silent extra column."""

    attempt_count: int
    body: str
    body_html: str
    last_error: str
    lease_expires_at: datetime | None
    max_attempts: int
    next_attempt_at: datetime | None
    rendered_at: datetime | None
    sent_at: datetime
    subject: str


def notification_move(
    notification: Notification,
    to: NotificationStatus,
    reason: NotificationReason,
    *,
    now: datetime,
    detail: str = "",
    actor: str = "",
    **fields: Unpack[NotificationFields],
) -> bool:
    """Move ``notification`` from the status and version it was read with; False if it moved
    meanwhile. Updates the instance in place on success."""
    if not notification_can_move(notification.status, to):
        return False
    if to in NOTIFICATION_TERMINAL:
        fields.setdefault("lease_expires_at", None)
        fields.setdefault("next_attempt_at", None)
    updates = {
        "status": to,
        "status_reason": reason,
        "status_detail": detail[:DETAIL_MAX_CHARS],
        "updated_at": now,
        **fields,
    }
    before = notification.status
    with transaction.atomic():
        if not row_compare_and_set(notification, updates):
            return False
        NotificationTransition.objects.create(
            notification_id=notification.pk,
            from_status=before,
            to_status=to,
            reason=reason,
            detail=detail[:DETAIL_MAX_CHARS],
            actor=actor[:150],
            attempt=notification.attempt_count,
            at=now,
        )
    logger.info(
        "notification %s -> %s (%s)",
        notification.pk,
        to,
        reason,
        extra={"notificationId": notification.pk, "sourceKey": notification.source_key},
    )
    return True


def notification_touch(
    notification: Notification, *, now: datetime, **fields: Unpack[NotificationFields]
) -> bool:
    """Compare-and-set of non-status fields (the rendered text) on the version read."""
    return row_compare_and_set(notification, {"updated_at": now, **fields})
