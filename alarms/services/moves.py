"""The one way an alarm changes status: a move of its ledger (``common.ledger``), a
compare-and-set on (status, version) with its transition row in the same statement. Zero
rows changed means someone else moved it first: nothing is written and the caller stops (or
re-reads and tries again)."""

from __future__ import annotations

import logging
from datetime import datetime
from typing import TypedDict, Unpack

from alarms.models import Alarm, AlarmTransition
from alarms.states import (
    ACTOR_MAX_CHARS,
    ALARM_MOVES,
    COMMENT_MAX_CHARS,
    AlarmReason,
    AlarmStatus,
)
from common.ledger import Ledger, Step, ledger_move_row

logger = logging.getLogger(__name__)
ALARMS = Ledger(Alarm, audit=AlarmTransition, audit_row="alarm", edges=ALARM_MOVES)


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
    step = alarm_step(to, reason, actor=actor, comment=comment)
    if not ledger_move_row(ALARMS, alarm, steps=[step], sets=fields, now=now):
        return False
    logger.info(
        "alarm %s -> %s (%s by %s)",
        alarm.pk,
        to,
        reason,
        actor,
        extra={"alarmId": alarm.pk, "alarmType": alarm.type},
    )
    return True


def alarm_step(to: str, reason: AlarmReason, *, actor: str, comment: str) -> Step:
    """A move's audit row: why, and who (a person) or what (a cause) moved it; the raise
    that opens an alarm writes one too (``ledger_created``: its insert is the guard)."""
    return Step(
        to,
        {
            "reason": reason,
            "actor": actor[:ACTOR_MAX_CHARS],
            "comment": comment[:COMMENT_MAX_CHARS],
        },
    )
