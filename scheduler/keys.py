"""SchedulerKey builders (docs/spec.md §4). The event path, bounded reconciliation and retries all
build keys here, so the same occurrence always lands on the same unique key. A key holds
identities only: no display text, recipients, templates or random GUIDs (except the manual
run's GUID, generated once before the run is requested).

Forms::

    reminder:{settingGuid}:{sourceType}:{sourceGuid}:{triggerKey}:{targetDate}:{offsetDays}
    reminder:{settingGuid}:{sourceType}:{sourceGuid}:{triggerKey}:threshold:{thresholdKey}
    report-subscription:{guid}:scheduled:{periodStartUtc-or-scheduledOn}
    report-subscription:{guid}:manual:{manualRunGuid}
    user-message:{messageGuid}:{scheduledOnUtc}
    rule-schedule:{ruleId}:{scheduledOnUtc}
    watchdog:{ruleId}:{silentSinceEpochMs}
    run-limit:{commandId}
"""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass
from datetime import date, datetime
from decimal import Decimal
from enum import StrEnum
from typing import Any, ClassVar

from scheduler.key_parts import (
    SchedulerKeyError,
    epoch_ms,
    epoch_ms_time,
    scheduler_input_hash,
    utc_stamp,
)
from scheduler.key_parts import guid as _guid
from scheduler.key_parts import ident as _ident
from scheduler.key_parts import non_negative_id as _id
from scheduler.key_parts import number as _number
from scheduler.key_parts import tail as _tail
from scheduler.key_parts import token as _token
from scheduler.key_parts import utc_stamp_parse as _stamp
from scheduler.models import AutomationType, TriggerType

__all__ = [
    "MAX_KEY_LENGTH",
    "FiringPolicy",
    "SchedulerKeyError",
    "SchedulerKeySpec",
    "epoch_ms",
    "epoch_ms_time",
    "scheduler_input_hash",
    "scheduler_key",
    "utc_stamp",
]

MAX_KEY_LENGTH = 400  # DueWork.scheduler_key max_length
_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}$")


class FiringPolicy(StrEnum):
    """Part of a threshold key: how often one threshold may fire (docs/spec.md §5)."""

    ONCE_PER_SOURCE = "OncePerSource"
    ONCE_PER_THRESHOLD = "OncePerThreshold"
    ONCE_PER_DAY = "OncePerDay"
    FALSE_TO_TRUE = "FalseToTrue"


@dataclass(frozen=True)
class ReminderDateKey:
    """A DateBased (or recurring) reminder occurrence: the target date and offset identify it."""

    setting_guid: str
    source_type: str
    source_guid: str
    trigger_key: str
    target_date: date
    offset_days: int

    automation_type: ClassVar[str] = AutomationType.REMINDER
    trigger_types: ClassVar[tuple[str, ...]] = (TriggerType.DATE_BASED, TriggerType.RECURRING)

    def parts(self) -> tuple[str, ...]:
        head = ("reminder", self.setting_guid, self.source_type, self.source_guid)
        tail = (self.trigger_key, self.target_date.isoformat(), str(self.offset_days))
        return head + tail


@dataclass(frozen=True)
class ReminderThresholdKey:
    """A ThresholdCondition reminder: the threshold key carries metric, value, policy, scope."""

    setting_guid: str
    source_type: str
    source_guid: str
    trigger_key: str
    threshold_key: str

    automation_type: ClassVar[str] = AutomationType.REMINDER
    trigger_types: ClassVar[tuple[str, ...]] = (TriggerType.THRESHOLD_CONDITION,)

    def parts(self) -> tuple[str, ...]:
        head = ("reminder", self.setting_guid, self.source_type, self.source_guid)
        return (*head, self.trigger_key, "threshold", self.threshold_key)


@dataclass(frozen=True)
class ReportScheduledKey:
    """A scheduled report run, identified by its period start (or scheduled time) in UTC."""

    subscription_guid: str
    period_start_utc: str

    automation_type: ClassVar[str] = AutomationType.REPORT_SUBSCRIPTION
    trigger_types: ClassVar[tuple[str, ...]] = (TriggerType.SCHEDULED_RUN, TriggerType.RECURRING)

    def parts(self) -> tuple[str, ...]:
        return ("report-subscription", self.subscription_guid, "scheduled", self.period_start_utc)


@dataclass(frozen=True)
class ReportManualKey:
    """A manual report run: its GUID is generated once, when the run is requested."""

    subscription_guid: str
    manual_run_guid: str

    automation_type: ClassVar[str] = AutomationType.REPORT_SUBSCRIPTION
    trigger_types: ClassVar[tuple[str, ...]] = (TriggerType.MANUAL_RUN,)

    def parts(self) -> tuple[str, ...]:
        return ("report-subscription", self.subscription_guid, "manual", self.manual_run_guid)


@dataclass(frozen=True)
class UserMessageKey:
    """One occurrence of a user's scheduled message, identified by its instant in UTC. The
    rows are reminders to the executor (they hand off to notifications the same way)."""

    message_guid: str
    scheduled_on_utc: str

    automation_type: ClassVar[str] = AutomationType.USER_MESSAGE
    trigger_types: ClassVar[tuple[str, ...]] = (TriggerType.DATE_BASED, TriggerType.RECURRING)

    def parts(self) -> tuple[str, ...]:
        return ("user-message", self.message_guid, self.scheduled_on_utc)


@dataclass(frozen=True)
class RuleScheduleKey:
    """One occurrence of an automation rule's schedule, by the rule and its instant in UTC
    (two schedules of a rule at one instant are one occurrence)."""

    rule_id: str
    scheduled_on_utc: str

    automation_type: ClassVar[str] = AutomationType.RULE_SCHEDULE
    trigger_types: ClassVar[tuple[str, ...]] = (TriggerType.RECURRING,)

    def parts(self) -> tuple[str, ...]:
        return ("rule-schedule", self.rule_id, self.scheduled_on_utc)


@dataclass(frozen=True)
class WatchdogKey:
    """One silence of a watchdog rule's trigger endpoint, by the rule and the time of the
    endpoint's last reading in epoch milliseconds: a silence fires once, and the next reading
    starts a new key (it re-arms)."""

    rule_id: str
    silent_since_epoch_ms: str

    automation_type: ClassVar[str] = AutomationType.WATCHDOG
    trigger_types: ClassVar[tuple[str, ...]] = (TriggerType.THRESHOLD_CONDITION,)

    def parts(self) -> tuple[str, ...]:
        return ("watchdog", self.rule_id, self.silent_since_epoch_ms)


@dataclass(frozen=True)
class RunLimitKey:
    """The run-time limit of one applied command: its follow-up back to the safe value runs
    once per command."""

    command_id: str

    automation_type: ClassVar[str] = AutomationType.RUN_LIMIT
    trigger_types: ClassVar[tuple[str, ...]] = (TriggerType.DATE_BASED,)

    def parts(self) -> tuple[str, ...]:
        return ("run-limit", self.command_id)


SchedulerKeySpec = (
    ReminderDateKey
    | ReminderThresholdKey
    | ReportScheduledKey
    | ReportManualKey
    | UserMessageKey
    | RuleScheduleKey
    | WatchdogKey
    | RunLimitKey
)


def scheduler_key(spec: SchedulerKeySpec) -> str:
    """The one renderer of a SchedulerKey; every path that ensures a row calls it."""
    text = ":".join(spec.parts())
    if len(text) > MAX_KEY_LENGTH:
        raise SchedulerKeyError(f"scheduler key longer than {MAX_KEY_LENGTH}: {text[:80]}…")
    return text


def reminder_date_key(
    *,
    setting_guid: uuid.UUID | str,
    source_type: str,
    source_guid: uuid.UUID | str | int,
    trigger_key: str,
    target_date: date,
    offset_days: int,
) -> ReminderDateKey:
    if isinstance(target_date, datetime) or not isinstance(target_date, date):
        raise SchedulerKeyError("target_date must be a date (not a datetime)")
    if isinstance(offset_days, bool) or not isinstance(offset_days, int):
        raise SchedulerKeyError("offset_days must be an integer")
    return ReminderDateKey(
        setting_guid=_guid(setting_guid, "setting_guid"),
        source_type=_token(source_type, "source_type"),
        source_guid=_ident(source_guid, "source_guid"),
        trigger_key=_token(trigger_key, "trigger_key"),
        target_date=target_date,
        offset_days=offset_days,
    )


def reminder_threshold_key(
    *,
    setting_guid: uuid.UUID | str,
    source_type: str,
    source_guid: uuid.UUID | str | int,
    trigger_key: str,
    threshold_key: str,
) -> ReminderThresholdKey:
    """``threshold_key`` comes from :func:`threshold_key`."""
    return ReminderThresholdKey(
        setting_guid=_guid(setting_guid, "setting_guid"),
        source_type=_token(source_type, "source_type"),
        source_guid=_ident(source_guid, "source_guid"),
        trigger_key=_token(trigger_key, "trigger_key"),
        threshold_key=_tail(threshold_key, "threshold_key"),
    )


def threshold_key(
    *,
    metric_key: str,
    threshold_value: int | float | Decimal | str,
    firing_policy: FiringPolicy | str,
    scope_key: str,
) -> str:
    """``{metricKey}:{value}:{firingPolicy}:{scopeKey}``; 90, 90.0 and "90.00" spell the same."""
    policy = FiringPolicy(firing_policy)
    return ":".join(
        (
            _token(metric_key, "metric_key"),
            _number(threshold_value),
            policy.value,
            _tail(scope_key, "scope_key"),
        )
    )


def report_scheduled_key(
    *, subscription_guid: uuid.UUID | str, period_start_utc: datetime
) -> ReportScheduledKey:
    """The period start when the subscription has periods, else the scheduled time (UTC)."""
    return ReportScheduledKey(
        subscription_guid=_guid(subscription_guid, "subscription_guid"),
        period_start_utc=utc_stamp(period_start_utc),
    )


def report_manual_key(
    *, subscription_guid: uuid.UUID | str, manual_run_guid: uuid.UUID | str
) -> ReportManualKey:
    return ReportManualKey(
        subscription_guid=_guid(subscription_guid, "subscription_guid"),
        manual_run_guid=_guid(manual_run_guid, "manual_run_guid"),
    )


def user_message_key(*, message_guid: uuid.UUID | str, scheduled_on: datetime) -> UserMessageKey:
    return UserMessageKey(
        message_guid=_guid(message_guid, "message_guid"), scheduled_on_utc=utc_stamp(scheduled_on)
    )


def rule_schedule_key(*, rule_id: int, scheduled_on: datetime) -> RuleScheduleKey:
    return RuleScheduleKey(rule_id=str(int(rule_id)), scheduled_on_utc=utc_stamp(scheduled_on))


def watchdog_key(*, rule_id: int, silent_since: datetime) -> WatchdogKey:
    """``silent_since`` is the trigger endpoint's last reading time (timezone-aware)."""
    return WatchdogKey(
        rule_id=str(_id(rule_id, "rule_id")),
        silent_since_epoch_ms=str(epoch_ms(silent_since)),
    )


def run_limit_key(*, command_id: int) -> RunLimitKey:
    return RunLimitKey(command_id=str(_id(command_id, "command_id")))


def parse_scheduler_key(text: str) -> SchedulerKeySpec:
    """The inverse of :func:`scheduler_key`, for handlers that reload the source at due time."""
    if text.startswith("reminder:"):
        return _parse_reminder(text)
    if text.startswith("report-subscription:"):
        parts = text.split(":", 3)
        if len(parts) == 4 and parts[2] == "scheduled":
            stamp = datetime.fromisoformat(parts[3].replace("Z", "+00:00"))
            return report_scheduled_key(subscription_guid=parts[1], period_start_utc=stamp)
        if len(parts) == 4 and parts[2] == "manual":
            return report_manual_key(subscription_guid=parts[1], manual_run_guid=parts[3])
    if text.startswith("user-message:"):
        parts = text.split(":", 2)
        if len(parts) == 3:
            stamp = _stamp(parts[2])
            return user_message_key(message_guid=parts[1], scheduled_on=stamp)
    if text.startswith("rule-schedule:"):
        parts = text.split(":", 2)
        if len(parts) == 3 and parts[1].isdigit():
            return rule_schedule_key(rule_id=int(parts[1]), scheduled_on=_stamp(parts[2]))
    if text.startswith("watchdog:"):
        parts = text.split(":")
        if len(parts) == 3 and parts[1].isdigit() and re.fullmatch(r"-?\d+", parts[2]):
            since = epoch_ms_time(int(parts[2]))
            return watchdog_key(rule_id=int(parts[1]), silent_since=since)
    if text.startswith("run-limit:"):
        parts = text.split(":")
        if len(parts) == 2 and parts[1].isdigit():
            return run_limit_key(command_id=int(parts[1]))
    raise SchedulerKeyError(f"not a scheduler key: {text[:80]!r}")


def _parse_reminder(text: str) -> SchedulerKeySpec:
    parts = text.split(":", 5)
    if len(parts) != 6:
        raise SchedulerKeyError(f"not a reminder key: {text[:80]!r}")
    _, setting, source_type, source, trigger, rest = parts
    common: dict[str, Any] = {
        "setting_guid": setting,
        "source_type": source_type,
        "source_guid": source,
        "trigger_key": trigger,
    }
    if rest.startswith("threshold:"):
        return reminder_threshold_key(**common, threshold_key=rest[len("threshold:") :])
    target, _, offset = rest.partition(":")
    if not _DATE.match(target) or not re.fullmatch(r"-?\d+", offset):
        raise SchedulerKeyError(f"not a reminder key: {text[:80]!r}")
    return reminder_date_key(
        **common, target_date=date.fromisoformat(target), offset_days=int(offset)
    )
