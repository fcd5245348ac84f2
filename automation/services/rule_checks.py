"""What is wrong with a rule as a whole: its trigger, its target and further actions (the
gates every command passes, ``automation.gates.target_failure``), its further conditions, its
schedules and its bounds. Pure checks over model instances and plain values, so the API, the
admin and code refuse the same rule with the same messages; the cycle check, which reads the
farm's other rules, lives in ``automation.services.rule_cycles``.

Errors are field name -> message; a nested list's errors are a list with one dict per item
(``{}`` for a good one), as DRF nests them: ``{"conditions": [{}, {"endpoint": "..."}]}``."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import time
from typing import Any, NotRequired, TypedDict

from alarms.models import AlarmSeverity
from automation.gates import target_failure
from automation.models import Operator
from automation.models.rules import PRIORITY_MAX, PRIORITY_MIN
from automation.models.schedules import EVERY_DAY
from automation.services.run_limits import run_limit_errors
from automation.states import ReasonCode
from common.json_types import JsonValue
from devices.models import DeviceInstanceEndpoint, Farm
from devices.values import value_has_type

RANGE_OPERATORS = frozenset({Operator.BETWEEN, Operator.OUTSIDE})
CONDITION_WINDOW_MAX_S = 7 * 86400
MAX_LATENESS_MAX_S = 86400
SILENCE_MAX_S = 7 * 86400  # the longest silence a watchdog (``silent_for``) waits for
WATCHDOG_PRIORITY = PRIORITY_MAX  # a watchdog created without a priority outranks the rest
_SILENCE_MESSAGE = f"a watchdog's silence: whole seconds from 1 to {SILENCE_MAX_S}"
NOT_ON_FARM = "must be an endpoint of a device on the rule's farm"
# What a refused target says, by the gate that refused it (else the value is wrong).
_TARGET_MESSAGES = {
    ReasonCode.TARGET_OTHER_FARM: NOT_ON_FARM,
    ReasonCode.TARGET_NOT_WRITABLE: "is not writable",
    ReasonCode.TARGET_DISABLED: "is disabled",
}

RuleErrors = dict[str, Any]  # a message, or for a nested list one dict of messages per item


class _RuleOwnFields(TypedDict, total=False):
    name: str
    trigger_endpoint: DeviceInstanceEndpoint | None  # None: a schedule-only rule
    operator: str  # "" with no trigger endpoint
    threshold_value: JsonValue
    threshold_value_high: JsonValue  # the upper bound of between/outside
    target_value: JsonValue
    max_on_s: int | None  # a run-time limit on the target's command
    max_on_value: JsonValue
    priority: int
    condition_window_s: int
    is_active: bool
    alarm_severity: str  # blank, or the severity of the rule's alarm


class RuleFields(_RuleOwnFields):
    """A new rule's own fields (``RULE_FIELDS``): the relations as model instances; farm and
    target endpoint required, the rest with the model's defaults."""

    farm: Farm
    target_endpoint: DeviceInstanceEndpoint


class RuleChanges(_RuleOwnFields, total=False):
    """Those of a rule's own fields an update changes."""

    farm: Farm
    target_endpoint: DeviceInstanceEndpoint


class ConditionInput(TypedDict):
    endpoint: DeviceInstanceEndpoint
    operator: str
    threshold_value: JsonValue
    threshold_value_high: NotRequired[JsonValue]


class ActionInput(TypedDict):
    target_endpoint: DeviceInstanceEndpoint
    target_value: JsonValue
    max_on_s: NotRequired[int | None]
    max_on_value: NotRequired[JsonValue]


class ScheduleInput(TypedDict):
    local_time: time
    weekdays: NotRequired[int]  # a bit per day, bit 0 Monday (``EVERY_DAY`` when left out)
    max_lateness_s: NotRequired[int]
    is_active: NotRequired[bool]


class RuleInvalid(ValueError):
    """Field name -> what is wrong with it (``RuleErrors``)."""

    def __init__(self, errors: RuleErrors) -> None:
        super().__init__(errors)
        self.errors = errors


def _on_farm(endpoint: DeviceInstanceEndpoint, farm: Farm) -> bool:
    return bool(endpoint.device.farm_id == farm.pk)


def _target_errors(
    endpoint: DeviceInstanceEndpoint, value: JsonValue, farm: Farm, *, names: tuple[str, str]
) -> dict[str, str]:
    """The gates' refusal of driving ``endpoint`` to ``value``, on the endpoint's field or on
    the value's (``names``)."""
    failure = (
        target_failure(endpoint, farm_id=farm.pk, value=value)
        if _on_farm(endpoint, farm)
        else ReasonCode.TARGET_OTHER_FARM
    )
    if failure is None:
        return {}
    if failure in _TARGET_MESSAGES:
        return {names[0]: _TARGET_MESSAGES[failure]}
    return {names[1]: str(failure)}


def _threshold_errors(
    endpoint: DeviceInstanceEndpoint, operator: str, low: JsonValue, high: JsonValue
) -> dict[str, str]:
    """An operator and its threshold(s), of the endpoint's data type."""
    if operator == Operator.SILENT_FOR:
        return _silence_errors(low, high)
    errors: dict[str, str] = {}
    if not operator:
        errors["operator"] = "required with an endpoint to compare"
    elif operator not in Operator.values:
        errors["operator"] = "is not an operator"
    data_type = endpoint.profile_endpoint.data_type
    if not value_has_type(data_type, low):
        errors["threshold_value"] = f"must be a {data_type}"
    if operator in RANGE_OPERATORS and (high is None or not value_has_type(data_type, high)):
        errors["threshold_value_high"] = "required for between/outside"
    return errors


def _trigger_errors(fields: Mapping[str, Any], *, has_schedule: bool) -> dict[str, str]:
    trigger = fields.get("trigger_endpoint")
    operator = fields.get("operator") or ""
    low, high = fields.get("threshold_value"), fields.get("threshold_value_high")
    if trigger is None:
        errors = {
            name: "only with a trigger endpoint"
            for name, given in (
                ("operator", operator),
                ("threshold_value", low is not None),
                ("threshold_value_high", high is not None),
            )
            if given
        }
        if not has_schedule:
            errors["trigger_endpoint"] = "required unless the rule has a schedule"
        return errors
    errors = _threshold_errors(trigger, operator, low, high)
    if not _on_farm(trigger, fields["farm"]):
        errors["trigger_endpoint"] = NOT_ON_FARM
    return errors


def silence_seconds(value: object) -> int | None:
    """A watchdog's threshold as whole seconds (1 to ``SILENCE_MAX_S``), else None."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    if isinstance(value, float) and not value.is_integer():
        return None
    seconds = int(value)
    return seconds if 1 <= seconds <= SILENCE_MAX_S else None


def _silence_errors(low: JsonValue, high: JsonValue) -> dict[str, str]:
    errors: dict[str, str] = {}
    if silence_seconds(low) is None:
        errors["threshold_value"] = _SILENCE_MESSAGE
    if high is not None:
        errors["threshold_value_high"] = "only for between/outside"
    return errors


def _watchdog_errors(
    fields: Mapping[str, object],
    conditions: Sequence[ConditionInput],
    schedules: Sequence[ScheduleInput],
) -> RuleErrors:
    """A watchdog fires on its silence alone; the rule's alarm severity is one of the
    alarms' severities, or blank."""
    errors: RuleErrors = {}
    severity = fields.get("alarm_severity") or ""
    if severity not in ("", *AlarmSeverity.values):
        names = ", ".join(AlarmSeverity.values)
        errors["alarm_severity"] = f"must be one of {names}, or blank"
    if fields.get("operator") != Operator.SILENT_FOR or fields.get("trigger_endpoint") is None:
        return errors
    if conditions:
        errors["conditions"] = "a watchdog (silent_for) takes no further conditions"
    if schedules:
        errors["schedules"] = "a watchdog (silent_for) fires on silence, not at times"
    return errors


def _bound_errors(fields: Mapping[str, Any]) -> dict[str, str]:
    errors: dict[str, str] = {}
    bounds = {
        "priority": (PRIORITY_MIN, PRIORITY_MAX),
        "condition_window_s": (1, CONDITION_WINDOW_MAX_S),
    }
    for name, (low, high) in bounds.items():
        value = fields.get(name)
        if value is None:
            continue
        if not _whole_in(value, low, high):
            errors[name] = f"must be a whole number from {low} to {high}"
    return errors


def _whole_in(value: object, low: int, high: int) -> bool:
    """Whatever the caller passed (a form may pass a string): an int, not a bool, in range."""
    return isinstance(value, int) and not isinstance(value, bool) and low <= value <= high


def _nested(errors: RuleErrors, name: str, items: list[dict[str, str]]) -> None:
    if any(items):
        errors[name] = items


def _condition_errors(
    conditions: Sequence[ConditionInput], farm: Farm, trigger: DeviceInstanceEndpoint | None
) -> list[dict[str, str]]:
    seen: set[int] = set()
    items = []
    for condition in conditions:
        endpoint = condition["endpoint"]
        item = _threshold_errors(
            endpoint,
            condition.get("operator") or "",
            condition.get("threshold_value"),
            condition.get("threshold_value_high"),
        )
        if condition.get("operator") == Operator.SILENT_FOR:
            item = {"operator": "silent_for is a watchdog's trigger condition only"}
        if not _on_farm(endpoint, farm):
            item["endpoint"] = NOT_ON_FARM
        elif trigger is not None and endpoint.pk == trigger.pk:
            item["endpoint"] = "is the rule's trigger endpoint"
        elif endpoint.pk in seen:
            item["endpoint"] = "is already a condition of this rule"
        seen.add(endpoint.pk)
        items.append(item)
    return items


def _action_errors(
    actions: Sequence[ActionInput], farm: Farm, target: DeviceInstanceEndpoint
) -> list[dict[str, str]]:
    seen: set[int] = set()
    items = []
    for action in actions:
        endpoint = action["target_endpoint"]
        names = ("target_endpoint", "target_value")
        item = _target_errors(endpoint, action.get("target_value"), farm, names=names)
        item |= run_limit_errors(endpoint, action.get("max_on_s"), action.get("max_on_value"))
        if endpoint.pk == target.pk:
            item["target_endpoint"] = "is the rule's target endpoint"
        elif endpoint.pk in seen:
            item["target_endpoint"] = "is already an action of this rule"
        seen.add(endpoint.pk)
        items.append(item)
    return items


def _schedule_errors(schedules: Sequence[ScheduleInput]) -> list[dict[str, str]]:
    seen: set[time] = set()
    items = []
    for schedule in schedules:
        item: dict[str, str] = {}
        at = schedule["local_time"]
        if at.tzinfo is not None:
            item["local_time"] = "is a local time in the farm's zone: give it without an offset"
        elif at in seen:
            item["local_time"] = "is already a time of this rule"
        seen.add(at)
        weekdays = schedule.get("weekdays", EVERY_DAY)
        if isinstance(weekdays, bool) or not isinstance(weekdays, int):
            item["weekdays"] = "must be a set of weekdays"
        elif not 1 <= weekdays <= EVERY_DAY:
            item["weekdays"] = "choose at least one weekday"
        lateness = schedule.get("max_lateness_s", 900)
        if (
            isinstance(lateness, bool)
            or not isinstance(lateness, int)
            or not 1 <= lateness <= MAX_LATENESS_MAX_S
        ):
            item["max_lateness_s"] = f"must be a whole number from 1 to {MAX_LATENESS_MAX_S}"
        items.append(item)
    return items


def rule_errors(
    fields: Mapping[str, Any],
    *,
    conditions: Sequence[ConditionInput] = (),
    actions: Sequence[ActionInput] = (),
    schedules: Sequence[ScheduleInput] = (),
) -> RuleErrors:
    """What is wrong with a rule of these fields (model instances for the relations) and
    these further conditions, actions and schedules; {} when nothing is. No cycle check."""
    farm, target = fields["farm"], fields["target_endpoint"]
    errors: RuleErrors = _trigger_errors(fields, has_schedule=bool(schedules))
    errors |= _target_errors(
        target, fields.get("target_value"), farm, names=("target_endpoint", "target_value")
    )
    errors |= _bound_errors(fields)
    errors |= _watchdog_errors(fields, conditions, schedules)
    errors |= run_limit_errors(target, fields.get("max_on_s"), fields.get("max_on_value"))
    _nested(
        errors, "conditions", _condition_errors(conditions, farm, fields.get("trigger_endpoint"))
    )
    _nested(errors, "actions", _action_errors(actions, farm, target))
    _nested(errors, "schedules", _schedule_errors(schedules))
    return errors
