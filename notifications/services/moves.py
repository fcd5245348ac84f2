"""The one way a notification changes status: a move of its ledger (``common.ledger``), a
compare-and-set on (status, version) with its transition row in the same statement. Zero
rows changed means someone else moved it first: nothing is written and the caller stops."""

from __future__ import annotations

import logging
from datetime import datetime
from typing import TypedDict, Unpack

from common.ledger import Ledger, Step, ledger_move_row
from notifications.models import Notification, NotificationTransition
from notifications.states import (
    NOTIFICATION_TERMINAL,
    NOTIFICATION_TRANSITIONS,
    NotificationReason,
    NotificationStatus,
)

logger = logging.getLogger(__name__)

DETAIL_MAX_CHARS = 500
# Each audit row records the attempt the move left on the row.
NOTIFICATIONS = Ledger(
    Notification,
    touched="updated_at",
    audit=NotificationTransition,
    audit_row="notification",
    copies={"attempt": "attempt_count"},
    edges=NOTIFICATION_TRANSITIONS,
)


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
    meanwhile or the move is not allowed. Updates the instance in place on success."""
    if to in NOTIFICATION_TERMINAL:
        fields.setdefault("lease_expires_at", None)
        fields.setdefault("next_attempt_at", None)
    detail = detail[:DETAIL_MAX_CHARS]
    sets = {"status_reason": reason, "status_detail": detail, **fields}
    step = Step(to, {"reason": reason, "detail": detail, "actor": actor[:150]})
    if not ledger_move_row(NOTIFICATIONS, notification, steps=[step], sets=sets, now=now):
        return False
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
    return ledger_move_row(NOTIFICATIONS, notification, sets=fields, now=now)
