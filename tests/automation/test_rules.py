"""Rules are created and changed through one service, checked against the gates every
command passes; the API and the admin both go through it."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.test import Client

from automation.models import AutomationRule
from automation.services.rules import RuleInvalid, rule_create, rule_update
from tests.devices.factories import make_farm

pytestmark = pytest.mark.django_db


def _fields(kit, **overrides):
    fields = {
        "farm": kit.farm,
        "name": "vent",
        "trigger_endpoint": kit.temp,
        "operator": "gt",
        "threshold_value": 30,
        "threshold_value_high": None,
        "target_endpoint": kit.io1,
        "target_value": True,
        "is_active": True,
    }
    return fields | overrides


def test_a_rule_that_could_never_send_a_command_is_refused_by_field() -> None:
    kit = make_farm()
    with pytest.raises(RuleInvalid) as refused:
        rule_create(**_fields(kit, target_endpoint=kit.humidity, target_value=5))
    assert refused.value.errors == {"target_endpoint": "is not writable"}
    with pytest.raises(RuleInvalid) as refused:
        rule_create(**_fields(kit, target_endpoint=kit.fan, target_value=150))
    assert refused.value.errors == {"target_value": "value_out_of_range"}
    assert not AutomationRule.objects.exists()


def test_an_update_is_checked_on_the_rule_it_would_make() -> None:
    kit = make_farm()
    rule = rule_create(**_fields(kit))
    with pytest.raises(RuleInvalid):
        rule_update(rule, target_endpoint=kit.fan)  # True is no fan speed
    rule.refresh_from_db()
    assert rule.target_endpoint_id == kit.io1.pk
    assert rule_update(rule, target_endpoint=kit.fan, target_value=60).target_value == 60


def test_the_admin_refuses_what_the_api_refuses(client: Client) -> None:
    kit = make_farm()
    User.objects.create_superuser("support", "s@example.com", "pw")
    client.login(username="support", password="pw")
    form = {
        "farm": kit.farm.pk,
        "name": "vent",
        "trigger_endpoint": kit.temp.pk,
        "operator": "gt",
        "threshold_value": "30",
        "threshold_value_high": "null",
        "target_endpoint": kit.humidity.pk,
        "target_value": "5",
        "is_active": "on",
    }
    page = client.post("/admin/automation/automationrule/add/", form)
    assert page.status_code == 200 and "is not writable" in page.content.decode()
    assert not AutomationRule.objects.exists()
    form["target_endpoint"], form["target_value"] = kit.io1.pk, "true"
    assert client.post("/admin/automation/automationrule/add/", form).status_code == 302
    assert AutomationRule.objects.get().target_endpoint_id == kit.io1.pk
