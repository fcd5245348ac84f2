"""The notification bookkeeping of an alarm: a sweep claims a due, unacknowledged alarm with a
compare-and-set on its version, which numbers the repeat; the repeat's source key
``alarm:{id}:{n}`` then makes each repeat reach each recipient and channel once."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from alarms.models import Alarm
from alarms.services.moves import ALARMS
from alarms.services.policy import Policy, alarm_policy_get
from alarms.states import AlarmStatus
from common.ledger import ledger_move_row


@dataclass(frozen=True)
class AlarmNotice:
    """A claimed repeat: which alarm, which repeat (1 is the first notification), and the
    recipient policy its severity names on its farm."""

    alarm: Alarm
    repeat: int
    recipient_policy: str

    @property
    def source_key(self) -> str:
        return f"alarm:{self.alarm.pk}:{self.repeat}"


def alarm_notify_claim(
    alarm: Alarm, *, now: datetime, policy: Policy | None = None
) -> AlarmNotice | None:
    """Take the due repeat of ``alarm`` as read (status active, its version): the next one
    becomes due ``repeat_every_s`` later. None if it moved meanwhile or is not due; the caller
    schedules the notification in the same transaction, so a rolled-back schedule un-claims.
    ``policy``: the farm's, when the caller read a batch's policies at once."""
    if (
        alarm.status != AlarmStatus.ACTIVE
        or alarm.next_notify_at is None
        or alarm.next_notify_at > now
    ):
        return None
    policy = policy or alarm_policy_get(alarm.farm_id)
    repeat = alarm.notify_count + 1
    sets = {
        "notify_count": repeat,
        "next_notify_at": now + timedelta(seconds=policy.repeat_every_s),
    }
    claimed = ledger_move_row(ALARMS, alarm, sets=sets, now=now)
    if not claimed:
        return None
    return AlarmNotice(
        alarm=alarm, repeat=repeat, recipient_policy=policy.recipient_policy(alarm.severity)
    )
