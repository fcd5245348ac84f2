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
"""

from __future__ import annotations

import hashlib
import json
import re
import uuid
from dataclasses import dataclass
from datetime import UTC, date, datetime
from decimal import Decimal, InvalidOperation
from enum import StrEnum
from typing import Any, ClassVar

from scheduler.models import AutomationType, TriggerType

MAX_KEY_LENGTH = 400  # DueWork.scheduler_key max_length
_TOKEN = re.compile(r"^[A-Za-z0-9_.\-]{1,100}$")
_TAIL = re.compile(r"^[A-Za-z0-9_.\-:]{1,200}$")  # last component: may contain ':'
_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}$")


class FiringPolicy(StrEnum):
    """Part of a threshold key: how often one threshold may fire (docs/spec.md §5)."""

    ONCE_PER_SOURCE = "OncePerSource"
    ONCE_PER_THRESHOLD = "OncePerThreshold"
    ONCE_PER_DAY = "OncePerDay"
    FALSE_TO_TRUE = "FalseToTrue"


class SchedulerKeyError(ValueError):
    """A key component that would make the key ambiguous or non-deterministic."""


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


SchedulerKeySpec = (
    ReminderDateKey
    | ReminderThresholdKey
    | ReportScheduledKey
    | ReportManualKey
    | UserMessageKey
    | RuleScheduleKey
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
    raise SchedulerKeyError(f"not a scheduler key: {text[:80]!r}")


def _stamp(text: str) -> datetime:
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise SchedulerKeyError(f"not a UTC stamp: {text[:40]!r}") from None


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


def scheduler_input_hash(value: Any) -> str:
    """sha256 of the normalised input (sorted keys, UTC times, canonical GUIDs and numbers)."""
    text = json.dumps(
        value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=_json_default
    )
    return hashlib.sha256(text.encode()).hexdigest()


def utc_stamp(moment: datetime) -> str:
    """``2026-01-31T22:00:00Z`` (microseconds only when present); naive times are refused."""
    if moment.tzinfo is None or moment.utcoffset() is None:
        raise SchedulerKeyError("times in scheduler keys must be timezone-aware")
    utc = moment.astimezone(UTC)
    micro = f".{utc.microsecond:06d}" if utc.microsecond else ""
    return utc.strftime("%Y-%m-%dT%H:%M:%S") + micro + "Z"


def _json_default(value: Any) -> Any:
    if isinstance(value, datetime):
        return utc_stamp(value)
    if isinstance(value, date):
        return value.isoformat()
    if isinstance(value, uuid.UUID):
        return str(value)
    if isinstance(value, Decimal):
        return _number(value)
    if isinstance(value, set | frozenset):
        return sorted(value, key=str)
    raise TypeError(f"cannot hash {type(value).__name__} in scheduler input")


def _token(value: str, name: str) -> str:
    if not isinstance(value, str) or not _TOKEN.match(value):
        raise SchedulerKeyError(f"{name} must match [A-Za-z0-9_.-]{{1,100}}, got {value!r}")
    return value


def _tail(value: str, name: str) -> str:
    if not isinstance(value, str) or not _TAIL.match(value):
        raise SchedulerKeyError(f"{name} must match [A-Za-z0-9_.:-]{{1,200}}, got {value!r}")
    return value


def _guid(value: uuid.UUID | str, name: str) -> str:
    """Canonical lowercase hyphenated form, however the GUID was spelled."""
    if isinstance(value, uuid.UUID):
        return str(value)
    try:
        return str(uuid.UUID(str(value)))
    except ValueError:
        raise SchedulerKeyError(f"{name} must be a GUID, got {value!r}") from None


def _ident(value: uuid.UUID | str | int, name: str) -> str:
    """A source's identity: a GUID (canonicalised), a non-negative integer id or a token."""
    if isinstance(value, bool):
        raise SchedulerKeyError(f"{name} must be a GUID, id or token, got {value!r}")
    if isinstance(value, int):
        if value < 0:
            raise SchedulerKeyError(f"{name} must not be negative")
        return str(value)
    if isinstance(value, uuid.UUID):
        return str(value)
    try:
        return str(uuid.UUID(value))
    except (ValueError, AttributeError, TypeError):
        return _token(value, name)


def _number(value: int | float | Decimal | str) -> str:
    if isinstance(value, bool):
        raise SchedulerKeyError("threshold value must be a number")
    try:
        number = Decimal(str(value))
    except InvalidOperation:
        raise SchedulerKeyError(f"threshold value must be a number, got {value!r}") from None
    if not number.is_finite():
        raise SchedulerKeyError("threshold value must be finite")
    text = format(number.normalize(), "f")
    return "0" if text in {"-0", "0"} else text
