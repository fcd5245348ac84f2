"""Rules are written with their further conditions, actions and schedules by one service, as
a whole: a rule that could never act, acts on the wrong farm, or would drive itself or other
rules in a loop is refused naming what is wrong (nested as DRF nests errors), and nothing of
it is written."""

from __future__ import annotations

from datetime import time, timedelta, timezone
from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from automation.models import AutomationRule, AutomationRuleSchedule
from automation.services.rules import RuleInvalid, rule_create, rule_update
from tests.devices.factories import FarmKit, make_farm

pytestmark = pytest.mark.django_db


def _fields(kit: FarmKit, **overrides: Any) -> dict[str, Any]:
    fields = {
        "farm": kit.farm,
        "name": "vent",
        "trigger_endpoint": kit.temp,
        "operator": "gt",
        "threshold_value": 30,
        "threshold_value_high": None,
        "target_endpoint": kit.io1,
        "target_value": True,
    }
    return fields | overrides


def _refused(**fields: Any) -> dict[str, Any]:
    with pytest.raises(RuleInvalid) as refused:
        rule_create(**fields)
    return refused.value.errors


def test_a_rule_is_saved_with_its_conditions_actions_and_schedules() -> None:
    kit = make_farm()
    rule = rule_create(
        **_fields(kit, priority=5, condition_window_s=120),
        conditions=[{"endpoint": kit.humidity, "operator": "lt", "threshold_value": 70}],
        actions=[{"target_endpoint": kit.fan, "target_value": 60}],
        schedules=[{"local_time": time(7, 0), "weekdays": 0b11111}],
    )
    assert (rule.priority, rule.condition_window_s) == (5, 120)
    assert [(c.endpoint_id, c.threshold_value) for c in rule.conditions.all()] == [
        (kit.humidity.pk, 70)
    ]
    assert [(a.target_endpoint_id, a.target_value) for a in rule.actions.all()] == [
        (kit.fan.pk, 60)
    ]
    schedule = rule.schedules.get()
    assert (schedule.weekdays, schedule.max_lateness_s, schedule.is_active) == (31, 900, True)


def test_an_update_replaces_the_lists_it_names_and_keeps_the_others() -> None:
    kit = make_farm()
    rule = rule_create(
        **_fields(kit),
        actions=[{"target_endpoint": kit.fan, "target_value": 60}],
        schedules=[{"local_time": time(7, 0)}, {"local_time": time(19, 0)}],
    )
    kept = rule.schedules.get(local_time=time(7, 0))
    rule_update(
        rule,
        schedules=[{"local_time": time(7, 0), "weekdays": 1}, {"local_time": time(8, 0)}],
    )
    rows = {s.local_time: s for s in AutomationRuleSchedule.objects.filter(rule=rule)}
    assert sorted(rows) == [time(7, 0), time(8, 0)]
    assert rows[time(7, 0)].pk == kept.pk and rows[time(7, 0)].weekdays == 1  # kept, changed
    assert rule.actions.count() == 1  # not named: kept
    rule_update(rule, actions=[])
    assert rule.actions.count() == 0 and rule.schedules.count() == 2


def test_a_schedule_only_rule_has_no_trigger_and_needs_a_schedule() -> None:
    kit = make_farm()
    no_trigger = _fields(kit, trigger_endpoint=None, operator="", threshold_value=None)
    assert _refused(**no_trigger) == {"trigger_endpoint": "required unless the rule has a schedule"}
    rule = rule_create(**no_trigger, schedules=[{"local_time": time(6, 30)}])
    assert rule.trigger_endpoint_id is None
    with pytest.raises(RuleInvalid) as refused:
        rule_update(rule, schedules=[])
    assert refused.value.errors == {"trigger_endpoint": "required unless the rule has a schedule"}
    errors = _refused(**(no_trigger | {"operator": "gt", "threshold_value": 3}))
    assert errors == {
        "operator": "only with a trigger endpoint",
        "threshold_value": "only with a trigger endpoint",
        "trigger_endpoint": "required unless the rule has a schedule",
    }
    assert _refused(**_fields(kit, operator="")) == {
        "operator": "required with an endpoint to compare"
    }
    assert AutomationRule.objects.count() == 1


def test_each_condition_is_checked_on_its_row() -> None:
    kit, other = make_farm(prefix="a"), make_farm(prefix="b")
    good = {"endpoint": kit.humidity, "operator": "lt", "threshold_value": 70}
    errors = _refused(
        **_fields(kit),
        conditions=[
            good,
            {"endpoint": other.humidity, "operator": "lt", "threshold_value": 70},
            {"endpoint": kit.io1, "operator": "eq", "threshold_value": "yes"},
            {"endpoint": kit.humidity, "operator": "gt", "threshold_value": 10},
            {"endpoint": kit.temp, "operator": "gt", "threshold_value": 10},
            {"endpoint": kit.fan, "operator": "between", "threshold_value": 10},
        ],
    )
    assert errors == {
        "conditions": [
            {},
            {"endpoint": "must be an endpoint of a device on the rule's farm"},
            {"threshold_value": "must be a bool"},
            {"endpoint": "is already a condition of this rule"},
            {"endpoint": "is the rule's trigger endpoint"},
            {"threshold_value_high": "required for between/outside"},
        ]
    }


def test_each_action_passes_the_gates_of_a_target() -> None:
    kit, other = make_farm(prefix="a"), make_farm(prefix="b")
    errors = _refused(
        **_fields(kit),
        actions=[
            {"target_endpoint": kit.fan, "target_value": 50},
            {"target_endpoint": kit.humidity, "target_value": 5},
            {"target_endpoint": kit.mode, "target_value": "turbo"},
            {"target_endpoint": other.fan, "target_value": 50},
            {"target_endpoint": kit.fan, "target_value": 150},
            {"target_endpoint": kit.io1, "target_value": False},
        ],
    )
    assert errors == {
        "actions": [
            {},
            {"target_endpoint": "is not writable"},
            {"target_value": "value_not_allowed"},
            {"target_endpoint": "must be an endpoint of a device on the rule's farm"},
            {
                "target_endpoint": "is already an action of this rule",
                "target_value": "value_out_of_range",
            },
            {"target_endpoint": "is the rule's target endpoint"},
        ]
    }


def test_schedules_and_bounds_are_checked() -> None:
    kit = make_farm()
    errors = _refused(
        **_fields(kit, priority=1001, condition_window_s=0),
        schedules=[
            {"local_time": time(7, 0)},
            {"local_time": time(7, 0)},
            {"local_time": time(8, 0, tzinfo=timezone(timedelta(hours=2)))},
            {"local_time": time(9, 0), "weekdays": 0, "max_lateness_s": 0},
        ],
    )
    assert errors["priority"] == "must be a whole number from -1000 to 1000"
    assert errors["condition_window_s"] == "must be a whole number from 1 to 604800"
    assert errors["schedules"][:2] == [{}, {"local_time": "is already a time of this rule"}]
    assert list(errors["schedules"][2]) == ["local_time"]
    assert errors["schedules"][3] == {
        "weekdays": "choose at least one weekday",
        "max_lateness_s": "must be a whole number from 1 to 86400",
    }


def test_a_rule_acting_on_its_own_condition_is_a_cycle() -> None:
    kit = make_farm()
    errors = _refused(
        **_fields(kit, trigger_endpoint=kit.fan, target_endpoint=kit.fan, target_value=10)
    )
    assert errors == {
        "target_endpoint": "closes a cycle of rules driving each other: 'vent' → 'vent'"
    }
    errors = _refused(
        **_fields(kit),
        conditions=[{"endpoint": kit.fan, "operator": "gt", "threshold_value": 50}],
        actions=[{"target_endpoint": kit.fan, "target_value": 10}],
    )
    assert errors == {"actions": "closes a cycle of rules driving each other: 'vent' → 'vent'"}


def test_rules_driving_each_other_are_refused_naming_them() -> None:
    kit, other = make_farm(prefix="a"), make_farm(prefix="b")

    def reading(endpoint: Any, value: Any, **rest: Any) -> dict[str, Any]:
        return _fields(kit, trigger_endpoint=endpoint, operator="eq", threshold_value=value) | rest

    rule_create(**reading(kit.fan, 50, name="fan on"))  # fan -> io1
    rule_create(
        **reading(kit.io1, True, name="io1 on", target_endpoint=kit.mode, target_value="auto")
    )
    closing = reading(kit.mode, "auto", name="mode", target_endpoint=kit.fan, target_value=10)
    assert _refused(**closing) == {
        "target_endpoint": (
            "closes a cycle of rules driving each other: 'mode' → 'fan on' → 'io1 on' → 'mode'"
        )
    }
    # Another farm's rules never count; an inactive rule drives nothing.
    rule_create(
        **_fields(
            other,
            trigger_endpoint=other.io1,
            operator="eq",
            threshold_value=True,
            target_endpoint=other.mode,
            target_value="auto",
        )
    )
    AutomationRule.objects.filter(name="io1 on").update(is_active=False)
    assert rule_create(**closing).pk


def test_the_cycle_check_reads_the_farm_in_a_fixed_number_of_queries() -> None:
    def queries(count: int) -> int:
        kit = make_farm()
        for n in range(count):
            rule_create(
                **_fields(kit, name=f"r{n}"),
                conditions=[{"endpoint": kit.humidity, "operator": "lt", "threshold_value": n}],
                actions=[{"target_endpoint": kit.fan, "target_value": n}],
            )
        candidate = _fields(kit, name="candidate", target_endpoint=kit.mode, target_value="auto")
        with CaptureQueriesContext(connection) as captured:
            rule_create(**candidate)
        return len(captured)

    assert queries(1) == queries(6)
