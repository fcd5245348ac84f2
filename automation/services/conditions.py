"""Whether a rule's conditions hold: its trigger endpoint's, and each further condition's,
each on its endpoint's reading. The reading that triggered the evaluation counts as it is;
every other one must be at most ``condition_window_s`` older than the moment of the decision,
so a rule never acts on a stale value of another sensor."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db.models import Prefetch, Q, QuerySet

from automation.models import (
    AutomationEndpointEvent,
    AutomationRule,
    AutomationRuleAction,
    AutomationRuleCondition,
)
from automation.operators import operator_matches
from common.json_types import JsonValue
from devices.models import DeviceInstanceEndpoint

_TARGET = ("target_endpoint__device", "target_endpoint__profile_endpoint")
# The rules that decide: active ones (a deleted rule never is) on farms not archived.
RULES_DECIDING = Q(is_active=True, farm__archived_at__isnull=True)


@dataclass(frozen=True)
class Reading:
    value: JsonValue
    at: datetime | None


def rules_loaded(
    rules: QuerySet[AutomationRule], *, active_only: bool = True
) -> list[AutomationRule]:
    """The (active) rules with what deciding needs: targets, further conditions and actions
    (three queries, whatever the number of rules). A deleted rule is never active (a check
    constraint), so active rules are never deleted ones; an archived farm's rules decide
    nothing."""
    if active_only:
        rules = rules.filter(RULES_DECIDING)
    return list(
        rules.select_related("farm", *_TARGET).prefetch_related(
            "conditions",
            Prefetch("actions", queryset=AutomationRuleAction.objects.select_related(*_TARGET)),
        )
    )


def rules_triggered_by(endpoint_ids: Iterable[int]) -> list[AutomationRule]:
    """The active rules a reading of any of these endpoints makes evaluate: their trigger
    endpoint or one of their further conditions is among them."""
    ids = set(endpoint_ids)
    # Two index lookups: an OR with a subquery would have PostgreSQL scan every rule.
    conditioned = list(
        AutomationRuleCondition.objects.filter(endpoint_id__in=ids).values_list(
            "rule_id", flat=True
        )
    )
    found = Q(trigger_endpoint_id__in=ids)
    if conditioned:
        found |= Q(pk__in=conditioned)
    return rules_loaded(AutomationRule.objects.filter(found))


def condition_endpoints(rule: AutomationRule) -> list[int]:
    own = [rule.trigger_endpoint_id] if rule.trigger_endpoint_id is not None else []
    return own + [c.endpoint_id for c in rule.conditions.all()]


def reading_ids(rules: Sequence[AutomationRule], *, also: Iterable[int] = ()) -> set[int]:
    return {pk for rule in rules for pk in condition_endpoints(rule)} | set(also)


def readings_load(
    rules: Sequence[AutomationRule], *, also: Iterable[int] = ()
) -> dict[int, Reading]:
    """The last reading of each condition endpoint, and of the endpoints in ``also`` (one
    query)."""
    ids = reading_ids(rules, also=also)
    rows = DeviceInstanceEndpoint.objects.filter(pk__in=ids).values_list(
        "pk", "last_value", "last_value_at"
    )
    return {pk: Reading(value, at) for pk, value, at in rows}


def rule_holds(
    rule: AutomationRule,
    readings: dict[int, Reading],
    *,
    at: datetime,
    event: AutomationEndpointEvent | None = None,
) -> bool:
    """True when every condition of ``rule`` holds at ``at``; ``event`` is the reading being
    evaluated (its value stands for its endpoint's)."""
    # (endpoint, operator, threshold, upper threshold of a range)
    conditions: list[tuple[int, str, JsonValue, JsonValue]] = [
        (c.endpoint_id, c.operator, c.threshold_value, c.threshold_value_high)
        for c in rule.conditions.all()
    ]
    if rule.trigger_endpoint_id is not None:
        conditions.insert(
            0,
            (
                rule.trigger_endpoint_id,
                rule.operator,
                rule.threshold_value,
                rule.threshold_value_high,
            ),
        )
    oldest = at - timedelta(seconds=rule.condition_window_s)
    for endpoint_id, operator, low, high in conditions:
        if event is not None and endpoint_id == event.device_instance_endpoint_id:
            value = event.normalized_value
        else:
            reading = readings.get(endpoint_id)
            if reading is None or reading.at is None or reading.at < oldest:
                return False
            value = reading.value
        if not operator_matches(operator, value, low, high):
            return False
    return True
