"""Rules are created and changed here, with their further conditions, actions and schedules in
the same transaction, checked against the same configuration gates every command passes
(``automation.services.rule_checks``) and refused when they would drive each other in a loop
(``automation.services.rule_cycles``): a rule that could never act, or would act forever, is
refused with the field that is wrong, wherever it comes from (API, admin, code).

A rule is deleted by ``rule_delete``: the row stays, inactive for good, as the subject of its
executions and commands, and only the admin still shows it; a deleted rule is never changed."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any, TypeVar, Unpack

from django.db import models, transaction
from django.utils import timezone

from automation.models import (
    AutomationRule,
    AutomationRuleAction,
    AutomationRuleCondition,
    AutomationRuleSchedule,
    Operator,
)
from automation.models.schedules import EVERY_DAY
from automation.services.rule_checks import (
    RANGE_OPERATORS,
    WATCHDOG_PRIORITY,
    ActionInput,
    ConditionInput,
    RuleChanges,
    RuleErrors,
    RuleFields,
    RuleInvalid,
    ScheduleInput,
    rule_errors,
)
from automation.services.rule_cycles import rule_cycle
from automation.services.rule_schedules import rule_schedule_rows_sync
from common.audit.writes import audited_bulk_create, audited_bulk_update, audited_update
from devices.models import Farm
from scheduler.states import SchedulerReason

__all__ = [
    "RANGE_OPERATORS",
    "RULE_FIELDS",
    "ActionInput",
    "ConditionInput",
    "RuleChanges",
    "RuleFields",
    "RuleInvalid",
    "ScheduleInput",
    "rule_create",
    "rule_delete",
    "rule_errors",
    "rule_nested",
    "rule_problems",
    "rule_update",
]

RULE_FIELDS = (
    "farm",
    "name",
    "trigger_endpoint",
    "operator",
    "threshold_value",
    "threshold_value_high",
    "target_endpoint",
    "target_value",
    "max_on_s",
    "max_on_value",
    "priority",
    "condition_window_s",
    "is_active",
    "alarm_severity",
)

# What an action left out of a write is: no run-time limit.
ACTION_DEFAULTS: dict[str, None] = {"max_on_s": None, "max_on_value": None}
# What a schedule left out of a write is: a replaced list's items are whole.
SCHEDULE_DEFAULTS: dict[str, int | bool] = {
    "weekdays": EVERY_DAY,
    "max_lateness_s": 900,
    "is_active": True,
}


def _cycle_errors(
    fields: Mapping[str, Any],
    rule_id: int | None,
    conditions: Sequence[ConditionInput],
    actions: Sequence[ActionInput],
) -> RuleErrors:
    trigger = fields.get("trigger_endpoint")
    reads = [c["endpoint"].pk for c in conditions]
    if trigger is not None:
        reads.insert(0, trigger.pk)
    target = fields["target_endpoint"].pk
    cycle = rule_cycle(
        farm_id=fields["farm"].pk,
        rule_id=rule_id,
        name=str(fields.get("name") or "this rule"),
        reads=reads,
        writes=[target, *(a["target_endpoint"].pk for a in actions)],
    )
    if cycle is None:
        return {}
    written, names = cycle
    message = "closes a cycle of rules driving each other: " + " → ".join(
        f"'{name}'" for name in [*names, names[0]]
    )
    return {"target_endpoint" if written == target else "actions": message}


def rule_problems(
    fields: Mapping[str, Any],
    *,
    rule_id: int | None,
    conditions: Sequence[ConditionInput],
    actions: Sequence[ActionInput],
    schedules: Sequence[ScheduleInput],
) -> RuleErrors:
    """Everything ``rule_create``/``rule_update`` would refuse (the cycle check included,
    once the rest passes), for a form to show before it saves; {} when nothing. ``fields``
    are ``RuleFields``, or a form's cleaned data that has not been narrowed to them."""
    errors = rule_errors(fields, conditions=conditions, actions=actions, schedules=schedules)
    return errors or _cycle_errors(fields, rule_id, conditions, actions)


def _checked(
    fields: Mapping[str, Any],
    rule_id: int | None,
    conditions: Sequence[ConditionInput],
    actions: Sequence[ActionInput],
    schedules: Sequence[ScheduleInput],
) -> None:
    """Under the farm's row lock, so two concurrent edits cannot close a cycle between them."""
    list(Farm.objects.select_for_update().filter(pk=fields["farm"].pk).values_list("pk"))
    errors = rule_problems(
        fields, rule_id=rule_id, conditions=conditions, actions=actions, schedules=schedules
    )
    if errors:
        raise RuleInvalid(errors)


_Nested = TypeVar("_Nested", bound=models.Model)  # a rule's condition, action or schedule


def _replace(
    rule: AutomationRule,
    model: type[_Nested],
    key: str,
    items: Sequence[Mapping[str, object]],
) -> None:
    """The rule's rows of ``model`` become ``items``: rows are matched on ``key`` (their
    unique field within the rule), so a kept row keeps its id and is written only if it
    changes; the others are deleted."""
    manager = model._default_manager
    existing = {getattr(row, key): row for row in manager.filter(rule=rule)}
    wanted = {_key_of(item[key.removesuffix("_id")]): item for item in items}
    gone = [row.pk for value, row in existing.items() if value not in wanted]
    if gone:
        manager.filter(pk__in=gone).delete()
    changed: list[_Nested] = []
    created: list[_Nested] = []
    names = {"updated_at"} & {f.name for f in model._meta.fields}
    for value, item in wanted.items():
        row = existing.get(value)
        if row is None:
            created.append(model(rule=rule, **item))
            continue
        differs = {
            name for name, new in item.items() if _key_of(getattr(row, name)) != _key_of(new)
        }
        if differs:
            for name in differs:
                setattr(row, name, item[name])
            if "updated_at" in names:
                row.updated_at = timezone.now()  # type: ignore[attr-defined]
            names |= differs
            changed.append(row)
    if changed:
        audited_bulk_update(model, changed, sorted(names))
    if created:
        audited_bulk_create(model, created)


def _key_of(value: object) -> object:
    """What a nested row is compared on: a related row by its id, any other value as is."""
    return value.pk if isinstance(value, models.Model) else value


def _save_nested(
    rule: AutomationRule,
    conditions: Sequence[ConditionInput] | None,
    actions: Sequence[ActionInput] | None,
    schedules: Sequence[ScheduleInput] | None,
) -> None:
    if conditions is not None:
        conditioned = [{"threshold_value_high": None, **c} for c in conditions]
        _replace(rule, AutomationRuleCondition, "endpoint_id", conditioned)
    if actions is not None:
        limited = [{**ACTION_DEFAULTS, **a} for a in actions]
        _replace(rule, AutomationRuleAction, "target_endpoint_id", limited)
    if schedules is not None:
        scheduled = [{**SCHEDULE_DEFAULTS, **s} for s in schedules]
        _replace(rule, AutomationRuleSchedule, "local_time", scheduled)
    rule._prefetched_objects_cache = {}  # type: ignore[attr-defined]  # read the new rows


def rule_nested(
    rule: AutomationRule,
) -> tuple[list[ConditionInput], list[ActionInput], list[ScheduleInput]]:
    """A saved rule's further conditions, actions and schedules, as the services take them
    (from the rule's prefetched rows when it has them)."""
    conditions: list[ConditionInput] = [
        {
            "endpoint": c.endpoint,
            "operator": c.operator,
            "threshold_value": c.threshold_value,
            "threshold_value_high": c.threshold_value_high,
        }
        for c in rule.conditions.all()
    ]
    actions: list[ActionInput] = [
        {
            "target_endpoint": a.target_endpoint,
            "target_value": a.target_value,
            "max_on_s": a.max_on_s,
            "max_on_value": a.max_on_value,
        }
        for a in rule.actions.all()
    ]
    schedules: list[ScheduleInput] = [
        {
            "local_time": s.local_time,
            "weekdays": s.weekdays,
            "max_lateness_s": s.max_lateness_s,
            "is_active": s.is_active,
        }
        for s in rule.schedules.all()
    ]
    return conditions, actions, schedules


def rule_create(
    *,
    conditions: Sequence[ConditionInput] = (),
    actions: Sequence[ActionInput] = (),
    schedules: Sequence[ScheduleInput] = (),
    **fields: Unpack[RuleFields],
) -> AutomationRule:
    """Raises ``RuleInvalid`` naming the fields that are wrong; nothing is written then. A
    watchdog (``silent_for``) given no priority gets ``WATCHDOG_PRIORITY``, the top one."""
    if fields.get("operator") == Operator.SILENT_FOR and "priority" not in fields:
        fields["priority"] = WATCHDOG_PRIORITY
    with transaction.atomic():
        _checked(fields, None, conditions, actions, schedules)
        rule = AutomationRule.objects.create(**fields)
        _save_nested(rule, conditions, actions, schedules)
        rule_schedule_rows_sync(rule_id=rule.pk, now=timezone.now())
    return rule


def rule_update(
    rule: AutomationRule,
    *,
    conditions: Sequence[ConditionInput] | None = None,
    actions: Sequence[ActionInput] | None = None,
    schedules: Sequence[ScheduleInput] | None = None,
    **changes: Unpack[RuleChanges],
) -> AutomationRule:
    """Apply ``changes`` to ``rule`` and replace each nested list given (None keeps it) if the
    result passes; raises ``RuleInvalid`` otherwise, and for a deleted rule. An edit lifts the
    rule's cool-downs (``updated_at`` moves)."""
    merged = {**{name: getattr(rule, name) for name in RULE_FIELDS}, **changes}
    saved_conditions, saved_actions, saved_schedules = rule_nested(rule)
    with transaction.atomic():
        _checked(
            merged,
            rule.pk,
            saved_conditions if conditions is None else conditions,
            saved_actions if actions is None else actions,
            saved_schedules if schedules is None else schedules,
        )
        _refuse_deleted(rule.pk)
        for name, value in changes.items():
            setattr(rule, name, value)
        rule.save()
        _save_nested(rule, conditions, actions, schedules)
        # The occurrences follow at once: rows the edit no longer wants stop, new ones exist.
        rule_schedule_rows_sync(rule_id=rule.pk, now=timezone.now())
    return rule


def _refuse_deleted(rule_id: int) -> None:
    """Under the rule's row lock, so a concurrent ``rule_delete`` is either seen here or waits
    for this edit: an edit never saves a deleted rule back to life."""
    live = AutomationRule.objects.select_for_update().filter(pk=rule_id, deleted_at__isnull=True)
    if not list(live.values_list("pk", flat=True)):
        raise RuleInvalid({"non_field_errors": "the rule was deleted"})


def rule_delete(*, rule_id: int, actor: str, now: datetime | None = None) -> bool:
    """Delete the rule: inactive for good and hidden from the API, who and when on its row,
    its pending schedule occurrences deactivated (``source_no_longer_valid``). Its executions,
    commands and their audit rows stay and still point at it; a command of it not yet sent
    ends at dispatch (``rule_inactive``), as for a deactivated rule. A compare-and-set on
    ``deleted_at``: False when the rule is gone or was already deleted (nothing is written)."""
    now = now or timezone.now()
    with transaction.atomic():
        moved = audited_update(
            AutomationRule.objects.filter(pk=rule_id, deleted_at__isnull=True),
            is_active=False,
            deleted_at=now,
            deleted_by=actor[:150],
            updated_at=now,
        )
        if moved != 1:
            return False
        rule_schedule_rows_sync(
            rule_id=rule_id, now=now, reason=SchedulerReason.SOURCE_NO_LONGER_VALID
        )
    return True
