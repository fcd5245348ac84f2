"""Every write and business decision about alarms; other apps call these."""

from alarms.services.commands import COMMAND_ALARMS, CommandEnded, command_alarms_raise
from alarms.services.lifecycle import (
    alarm_acknowledge,
    alarm_clear,
    alarm_clear_by_cause,
    alarm_raise,
)
from alarms.services.moves import alarm_move
from alarms.services.notify import AlarmNotice, alarm_notify_claim
from alarms.services.policy import Policy, alarm_policies_get, alarm_policy_get

__all__ = [
    "COMMAND_ALARMS",
    "AlarmNotice",
    "CommandEnded",
    "Policy",
    "alarm_acknowledge",
    "alarm_clear",
    "alarm_clear_by_cause",
    "alarm_move",
    "alarm_notify_claim",
    "alarm_policies_get",
    "alarm_policy_get",
    "alarm_raise",
    "command_alarms_raise",
]
