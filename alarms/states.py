"""Alarm vocabularies and the allowed status moves, as plain constants (no database).

An alarm opens ``active``; a person acknowledges it (the repeats stop) and it clears, by hand
or when its cause clears. A cleared alarm never reopens: the next raise opens a new one."""

from __future__ import annotations

from django.db.models import TextChoices


class AlarmSeverity(TextChoices):
    CRITICAL = "critical"
    MAJOR = "major"
    MINOR = "minor"
    WARNING = "warning"


class AlarmStatus(TextChoices):
    ACTIVE = "active"
    ACKNOWLEDGED = "acknowledged"
    CLEARED = "cleared"


class AlarmSource(TextChoices):
    DEVICE = "device"
    ENDPOINT = "endpoint"
    RULE = "rule"
    COMMAND = "command"
    ROLLOUT = "rollout"


class AlarmType(TextChoices):
    DEVICE_OFFLINE = "device_offline"
    WATCHDOG = "watchdog"
    COMMAND_FAILED = "command_failed"
    COMMAND_EXPIRED = "command_expired"
    COMMAND_UNCERTAIN = "command_uncertain"
    ROLLOUT_ABORTED = "rollout_aborted"
    RULE_ALARM = "rule_alarm"


class AlarmReason(TextChoices):
    """Why an alarm moved (reason codes of its audit rows)."""

    RAISED = "raised"
    ACKNOWLEDGED = "acknowledged"
    CLEARED_BY_HAND = "cleared_by_hand"
    CLEARED_BY_CAUSE = "cleared_by_cause"


S = AlarmStatus
ALARM_MOVES: dict[str, frozenset[str]] = {
    "": frozenset({S.ACTIVE}),  # the raise that opens it
    S.ACTIVE: frozenset({S.ACKNOWLEDGED, S.CLEARED}),
    S.ACKNOWLEDGED: frozenset({S.CLEARED}),
}
ALARM_OPEN: frozenset[str] = frozenset({S.ACTIVE, S.ACKNOWLEDGED})
# Severity order, most severe first (lists sort by it; the metric answers each).
SEVERITY_RANK: dict[str, int] = {
    AlarmSeverity.CRITICAL: 0,
    AlarmSeverity.MAJOR: 1,
    AlarmSeverity.MINOR: 2,
    AlarmSeverity.WARNING: 3,
}
# Who is told, by severity, when a farm has no policy row (recipient policies of the
# notifications app): severe alarms reach every member and the external contacts, the
# others the farm's managers.
DEFAULT_RECIPIENTS: dict[str, str] = {
    AlarmSeverity.CRITICAL: "everyone",
    AlarmSeverity.MAJOR: "everyone",
    AlarmSeverity.MINOR: "farm_managers",
    AlarmSeverity.WARNING: "farm_managers",
}
# The recipient policies (notifications.services.recipients) a farm may name per severity;
# "" tells nobody.
RECIPIENT_POLICY_NAMES: tuple[str, ...] = (
    "everyone",
    "farm_members",
    "farm_managers",
    "external_contacts",
    "",
)
DEFAULT_RAISE_ON: tuple[str, ...] = ("failed", "expired", "uncertain")
DEFAULT_REPEAT_EVERY_S = 900
COMMENT_MAX_CHARS = 500
ACTOR_MAX_CHARS = 150
DETAIL_MAX_CHARS = 500
