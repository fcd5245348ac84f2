"""The rule page's inlines: further conditions, actions and schedules (weekdays as
checkboxes) are saved with the rule through the rule service, and each refusal of the service
is shown on its row or field (never a server error); the list shows priority and schedules."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import time
from typing import Any

import pytest
from django.test import Client

from automation.models import AutomationRule, AutomationRuleSchedule
from automation.services.rules import RuleInvalid, rule_create
from tests.devices.factories import FarmKit, make_farm

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("clock_at_fixture_dates")]
RULE_URL = "/admin/automation/automationrule/"


def _management(prefix: str, total: int, initial: int = 0) -> dict[str, Any]:
    return {
        f"{prefix}-TOTAL_FORMS": str(total),
        f"{prefix}-INITIAL_FORMS": str(initial),
        f"{prefix}-MIN_NUM_FORMS": "0",
        f"{prefix}-MAX_NUM_FORMS": "1000",
    }


def _form(
    kit: FarmKit,
    *,
    conditions: Sequence[dict[str, Any]] = (),
    actions: Sequence[dict[str, Any]] = (),
    schedules: Sequence[dict[str, Any]] = (),
    initial: dict[str, int] | None = None,
    **overrides: Any,
) -> dict[str, Any]:
    form: dict[str, Any] = {
        "farm": kit.farm.pk,
        "name": "vent",
        "trigger_endpoint": kit.temp.pk,
        "operator": "gt",
        "threshold_value": "30",
        "threshold_value_high": "",
        "target_endpoint": kit.io1.pk,
        "target_value": "true",
        "priority": "0",
        "condition_window_s": "600",
        "is_active": "on",
    } | overrides
    for prefix, rows in (
        ("conditions", conditions),
        ("actions", actions),
        ("schedules", schedules),
    ):
        form |= _management(prefix, len(rows), (initial or {}).get(prefix, 0))
        for index, row in enumerate(rows):
            form |= {f"{prefix}-{index}-{name}": value for name, value in row.items()}
    return form


def _row_errors(page: Any, prefix: str) -> list[dict[str, list[str]]]:
    assert page.status_code == 200, page.status_code
    for inline in page.context["inline_admin_formsets"]:
        if inline.formset.prefix == prefix:
            return [dict(form.errors) for form in inline.formset.forms]
    raise AssertionError(f"no inline {prefix}")


def test_a_rule_is_added_with_its_inline_rows(support: Client) -> None:
    kit = make_farm(prefix="inl")
    form = _form(
        kit,
        priority="7",
        conditions=[{"endpoint": kit.humidity.pk, "operator": "lt", "threshold_value": "70"}],
        actions=[{"target_endpoint": kit.fan.pk, "target_value": "40"}],
        schedules=[
            {
                "local_time": "07:30",
                "weekdays": ["0", "4"],
                "max_lateness_s": "600",
                "is_active": "on",
            }
        ],
    )
    page = support.post(f"{RULE_URL}add/", form)
    assert page.status_code == 302, page.context and page.context["adminform"].form.errors
    rule = AutomationRule.objects.get()
    assert rule.priority == 7
    assert [(c.endpoint_id, c.threshold_value) for c in rule.conditions.all()] == [
        (kit.humidity.pk, 70)
    ]
    assert [(a.target_endpoint_id, a.target_value) for a in rule.actions.all()] == [
        (kit.fan.pk, 40)
    ]
    schedule = rule.schedules.get()
    assert (schedule.local_time, schedule.weekdays, schedule.max_lateness_s) == (
        time(7, 30),
        0b10001,
        600,
    )
    listing = support.get(RULE_URL).content.decode()
    assert "07:30 Mon Fri" in listing and '<td class="field-priority">7</td>' in listing


def test_a_bad_row_shows_its_error_on_that_row(support: Client) -> None:
    kit = make_farm(prefix="row")
    conditions = [
        {"endpoint": kit.humidity.pk, "operator": "lt", "threshold_value": "70"},
        {"endpoint": kit.temp.pk, "operator": "gt", "threshold_value": "10"},  # the trigger
    ]
    page = support.post(f"{RULE_URL}add/", _form(kit, conditions=conditions))
    assert _row_errors(page, "conditions") == [{}, {"endpoint": ["is the rule's trigger endpoint"]}]
    actions = [{"target_endpoint": kit.humidity.pk, "target_value": "5"}]
    page = support.post(f"{RULE_URL}add/", _form(kit, actions=actions))
    assert _row_errors(page, "actions") == [{"target_endpoint": ["is not writable"]}]
    schedules = [{"local_time": "07:00", "max_lateness_s": "900"}]  # no weekday ticked
    page = support.post(f"{RULE_URL}add/", _form(kit, schedules=schedules))
    assert "weekdays" in _row_errors(page, "schedules")[0]
    assert not AutomationRule.objects.exists()


def test_a_schedule_only_rule_and_a_cycle(support: Client) -> None:
    kit = make_farm(prefix="only")
    only: dict[str, Any] = {"trigger_endpoint": "", "operator": "", "threshold_value": ""}
    page = support.post(f"{RULE_URL}add/", _form(kit, **only))
    errors = page.context["adminform"].form.errors
    assert errors == {"trigger_endpoint": ["required unless the rule has a schedule"]}
    schedules = [
        {"local_time": "06:00", "weekdays": [str(d) for d in range(7)], "max_lateness_s": "900"}
    ]
    assert (
        support.post(f"{RULE_URL}add/", _form(kit, schedules=schedules, **only)).status_code == 302
    )
    assert AutomationRule.objects.get().trigger_endpoint_id is None
    looping = _form(
        kit, name="loop", trigger_endpoint=kit.io1.pk, operator="eq", threshold_value="true"
    )
    page = support.post(f"{RULE_URL}add/", looping)
    assert page.context["adminform"].form.errors == {
        "target_endpoint": ["closes a cycle of rules driving each other: 'loop' → 'loop'"]
    }


def test_the_change_page_replaces_rows_and_a_post_without_inlines_keeps_them(
    support: Client,
) -> None:
    kit = make_farm(prefix="chg")
    rule = rule_create(
        farm=kit.farm,
        name="vent",
        trigger_endpoint=kit.temp,
        operator="gt",
        threshold_value=30,
        target_endpoint=kit.io1,
        target_value=True,
        schedules=[{"local_time": time(7, 0)}, {"local_time": time(19, 0)}],
    )
    first, second = rule.schedules.order_by("local_time")
    page = support.get(f"{RULE_URL}{rule.pk}/change/").content.decode()
    assert 'type="checkbox" name="schedules-0-weekdays" value="6"' in page
    schedules = [
        {
            "id": first.pk,
            "rule": rule.pk,
            "local_time": "07:00",
            "weekdays": ["5", "6"],
            "max_lateness_s": "900",
            "is_active": "on",
        },
        {
            "id": second.pk,
            "rule": rule.pk,
            "local_time": "19:00",
            "weekdays": ["0"],
            "max_lateness_s": "900",
            "DELETE": "on",
        },
    ]
    form = _form(kit, schedules=schedules, initial={"schedules": 2})
    assert support.post(f"{RULE_URL}{rule.pk}/change/", form).status_code == 302
    kept = AutomationRuleSchedule.objects.get(rule=rule)
    assert (kept.pk, kept.weekdays) == (first.pk, 0b1100000)
    bare = {k: v for k, v in _form(kit, priority="3").items() if not k.startswith("schedules")}
    assert support.post(f"{RULE_URL}{rule.pk}/change/", bare).status_code == 302
    rule.refresh_from_db()
    assert rule.priority == 3 and rule.schedules.count() == 1


def test_a_refusal_only_at_the_save_is_a_message_not_a_server_error(
    support: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What a concurrent edit does: the form passed, the save under the farm's lock refuses."""
    kit = make_farm(prefix="race")

    def refuse(**_: Any) -> AutomationRule:
        raise RuleInvalid({"target_endpoint": "closes a cycle of rules driving each other"})

    monkeypatch.setattr("automation.admin.rules.rule_create", refuse)
    page = support.post(f"{RULE_URL}add/", _form(kit), follow=True)
    assert page.status_code == 200
    assert "Not saved" in page.content.decode() and "closes a cycle" in page.content.decode()
    assert not AutomationRule.objects.exists()
