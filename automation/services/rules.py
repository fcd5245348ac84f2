"""Rules are created and changed here, checked against the same configuration gates every
command passes (``automation.gates.target_failure``): a rule that could never send a command
is refused with the field that is wrong, wherever it comes from (API, admin, code)."""

from __future__ import annotations

from typing import Any

from django.db import transaction

from automation.gates import target_failure
from automation.models import AutomationRule, Operator
from automation.states import ReasonCode
from devices.values import value_has_type

RANGE_OPERATORS = frozenset({Operator.BETWEEN, Operator.OUTSIDE})
RULE_FIELDS = (
    "farm",
    "name",
    "trigger_endpoint",
    "operator",
    "threshold_value",
    "threshold_value_high",
    "target_endpoint",
    "target_value",
    "is_active",
)

# What a refused target says, by the gate that refused it.
_TARGET_MESSAGES = {
    ReasonCode.TARGET_OTHER_FARM: (
        "target_endpoint",
        "must be an endpoint of a device on the rule's farm",
    ),
    ReasonCode.TARGET_NOT_WRITABLE: ("target_endpoint", "is not writable"),
    ReasonCode.TARGET_DISABLED: ("target_endpoint", "is disabled"),
}


class RuleInvalid(ValueError):
    """Field name → what is wrong with it."""

    def __init__(self, errors: dict[str, str]) -> None:
        super().__init__(errors)
        self.errors = errors


def rule_errors(fields: dict[str, Any]) -> dict[str, str]:
    """What is wrong with a rule of these fields (model instances for the relations); {} when
    nothing is."""
    errors: dict[str, str] = {}
    farm, trigger, target = fields["farm"], fields["trigger_endpoint"], fields["target_endpoint"]
    if trigger.device.farm_id != farm.pk:
        errors["trigger_endpoint"] = "must be an endpoint of a device on the rule's farm"
    failure = (
        ReasonCode.TARGET_OTHER_FARM
        if target.device.farm_id != farm.pk
        else target_failure(target, farm_id=farm.pk, value=fields["target_value"])
    )
    if failure in _TARGET_MESSAGES:
        name, message = _TARGET_MESSAGES[failure]
        errors[name] = message
    elif failure is not None:
        errors["target_value"] = str(failure)
    data_type = trigger.profile_endpoint.data_type
    if not value_has_type(data_type, fields["threshold_value"]):
        errors["threshold_value"] = f"must be a {data_type}"
    high = fields.get("threshold_value_high")
    if fields["operator"] in RANGE_OPERATORS and (
        high is None or not value_has_type(data_type, high)
    ):
        errors["threshold_value_high"] = "required for between/outside"
    return errors


def rule_create(**fields: Any) -> AutomationRule:
    """Raises ``RuleInvalid`` naming the fields that are wrong."""
    errors = rule_errors(fields)
    if errors:
        raise RuleInvalid(errors)
    return AutomationRule.objects.create(**fields)


def rule_update(rule: AutomationRule, **changes: Any) -> AutomationRule:
    """Apply ``changes`` to ``rule`` if the result passes; raises ``RuleInvalid`` otherwise.
    An edit lifts the rule's cool-downs (``updated_at`` moves)."""
    merged = {name: getattr(rule, name) for name in RULE_FIELDS} | changes
    errors = rule_errors(merged)
    if errors:
        raise RuleInvalid(errors)
    with transaction.atomic():
        for name, value in changes.items():
            setattr(rule, name, value)
        rule.save()
    return rule
