"""Commands that ended badly raise alarms, as each farm's alarm policy chooses."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from alarms.services.lifecycle import alarm_raise
from alarms.services.policy import alarm_policies_get
from alarms.states import AlarmSeverity, AlarmSource, AlarmType

# A command status that may raise -> (type, severity). A failed or uncertain command may have
# left an output in an unknown state; an expired one never reached its device.
COMMAND_ALARMS: dict[str, tuple[AlarmType, AlarmSeverity]] = {
    "failed": (AlarmType.COMMAND_FAILED, AlarmSeverity.MAJOR),
    "uncertain": (AlarmType.COMMAND_UNCERTAIN, AlarmSeverity.MAJOR),
    "expired": (AlarmType.COMMAND_EXPIRED, AlarmSeverity.MINOR),
}


@dataclass(frozen=True)
class CommandEnded:
    """A command that reached an end status (the caller's move, committed or about to be)."""

    command_id: int
    farm_id: int
    status: str


def command_alarms_raise(*, commands: Sequence[CommandEnded], now: datetime) -> int:
    """Raise command_<status> for each command whose farm's policy names its status; returns
    how many alarms were raised (new or counted again). One policy read for the batch."""
    policies = alarm_policies_get({c.farm_id for c in commands})
    raised = 0
    for command in commands:
        alarm = COMMAND_ALARMS.get(command.status)
        if alarm is None or command.status not in policies[command.farm_id].command_statuses:
            continue
        type_, severity = alarm
        alarm_raise(
            farm_id=command.farm_id,
            source=AlarmSource.COMMAND,
            source_id=command.command_id,
            type=type_,
            severity=severity,
            detail=f"command:{command.command_id} ended {command.status}",
            actor="system",
            now=now,
        )
        raised += 1
    return raised
