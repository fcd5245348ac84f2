"""The one way an alarm changes status: a compare-and-set on (status, version) that writes
its transition row in the same transaction. Zero rows changed means someone else moved it
first: nothing is written and the caller stops (or re-reads and tries again)."""

from __future__ import annotations

import logging
from datetime import datetime
from typing import TypedDict, Unpack

from django.db import transaction

from alarms.models import Alarm, AlarmTransition
from alarms.states import (
    ACTOR_MAX_CHARS,
    COMMENT_MAX_CHARS,
    AlarmReason,
    AlarmStatus,
    alarm_can_move,
)
from common.sql import row_compare_and_set

logger = logging.getLogger(__name__)


class AlarmFields(TypedDict, total=False):
    """The columns a move sets beside status and version: the one list of them."""

    acknowledged_by: str
    acknowledged_at: datetime
    acknowledge_comment: str
    cleared_by: str
    cleared_at: datetime
    clear_comment: str
    next_notify_at: datetime | None


def alarm_move(
    alarm: Alarm,
    to: AlarmStatus,
    reason: AlarmReason,
    *,
    actor: str,
    comment: str = "",
    now: datetime,
    **fields: Unpack[AlarmFields],
) -> bool:
    """Move ``alarm`` from the status and version it was read with; False if it moved
    meanwhile or the move is not allowed. Updates the instance in place on success."""
    if not alarm_can_move(alarm.status, to):
        return False
    before = alarm.status
    with transaction.atomic():
        if not row_compare_and_set(alarm, {"status": to, **fields}):
            return False
        alarm_transition_write(alarm, before, to, reason, actor=actor, comment=comment, now=now)
    logger.info(
        "alarm %s -> %s (%s by %s)",
        alarm.pk,
        to,
        reason,
        actor,
        extra={"alarmId": alarm.pk, "alarmType": alarm.type},
    )
    return True


def alarm_transition_write(
    alarm: Alarm,
    before: str,
    to: str,
    reason: AlarmReason,
    *,
    actor: str,
    comment: str,
    now: datetime,
) -> None:
    """The audit row of a move; only ``alarm_move`` and the raise that opens an alarm (its
    insert is the compare-and-set) write one."""
    AlarmTransition.objects.create(
        alarm_id=alarm.pk,
        from_status=before,
        to_status=to,
        reason=reason,
        actor=actor[:ACTOR_MAX_CHARS],
        comment=comment[:COMMENT_MAX_CHARS],
        at=now,
    )
