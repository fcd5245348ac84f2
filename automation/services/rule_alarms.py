"""A rule's own alarm: a rule with ``alarm_severity`` raises a ``rule_alarm`` alarm when it
fires on a reading and clears it (``condition false again``) when a reading finds its
condition false, in the transaction that evaluated the reading.

Cheap on the reading path: only rules with a severity count, and one indexed read of their
open alarms per batch comes before any write; a rule that keeps firing while its alarm is open
writes nothing more. A watchdog's alarm is its own (``automation.services.watchdog``)."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime

from alarms.models import Alarm, AlarmSource, AlarmStatus, AlarmType
from alarms.services import alarm_clear_by_cause, alarm_raise
from automation.models import AutomationRule, Operator

CONDITION_FALSE = "condition false again"
ALARM_ACTOR = "rule"
_OPEN = (AlarmStatus.ACTIVE, AlarmStatus.ACKNOWLEDGED)


def rule_alarms_sync(*, verdicts: Mapping[int, tuple[AutomationRule, bool]], now: datetime) -> int:
    """Raise or clear the alarms of rules with a severity by their latest verdict (rule id →
    (rule, whether its conditions held)); how many alarms moved."""
    alarmed = {
        pk: (rule, holds)
        for pk, (rule, holds) in verdicts.items()
        if rule.alarm_severity and rule.operator != Operator.SILENT_FOR
    }
    if not alarmed:
        return 0
    open_ids = set(
        Alarm.objects.filter(
            source=AlarmSource.RULE,
            type=AlarmType.RULE_ALARM,
            source_id__in=list(alarmed),
            status__in=_OPEN,
        ).values_list("source_id", flat=True)
    )
    moved = 0
    for pk, (rule, holds) in alarmed.items():
        if holds and pk not in open_ids:
            alarm_raise(
                farm_id=rule.farm_id,
                source=AlarmSource.RULE,
                source_id=pk,
                type=AlarmType.RULE_ALARM,
                severity=rule.alarm_severity,
                detail=f"rule fired: {rule.name}",
                actor=ALARM_ACTOR,
                now=now,
            )
            moved += 1
        elif not holds and pk in open_ids:
            moved += alarm_clear_by_cause(
                source=AlarmSource.RULE,
                source_id=pk,
                type=AlarmType.RULE_ALARM,
                cause=CONDITION_FALSE,
                now=now,
            )
    return moved
