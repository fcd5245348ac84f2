"""Writing a watchdog (``silent_for``) or a rule with its own alarm: a watchdog without a
priority gets the top one; a bad silence, a watchdog on another farm's endpoint or an unknown
alarm severity is a 400 (or an admin form error) naming the field, and nothing is written. A
rule with ``alarm_severity`` raises its alarm as it fires and clears it when its condition is
false again."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client
from rest_framework.test import APIClient

from alarms.models import Alarm, AlarmStatus
from automation.models import AutomationRule
from automation.services.evaluate import endpoint_events_evaluate
from automation.services.ingest import telemetry_ingest
from automation.services.rule_alarms import CONDITION_FALSE
from devices.mqtt.messages import InboundTelemetry
from tests.common.auth import token_client
from tests.conftest import FIXTURE_NOW, Tenant
from tests.devices.factories import FarmFactory, make_farm

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("clock_at_fixture_dates")]
RULES = "/api/v1/rules/"


def _watchdog(t: Tenant, **overrides: Any) -> dict[str, Any]:
    body = {
        "farm": t.kit.farm.pk,
        "name": "heater off when the sensor is silent",
        "trigger_endpoint": t.kit.temp.pk,
        "operator": "silent_for",
        "threshold_value": 600,
        "target_endpoint": t.kit.io1.pk,
        "target_value": False,
    }
    return body | overrides


def _post(client: APIClient, body: dict[str, Any]) -> Any:
    return client.post(RULES, body, format="json")


def test_a_watchdog_without_a_priority_gets_the_top_one(tenants: tuple[Tenant, Tenant]) -> None:
    alpha, _ = tenants
    created = _post(token_client(alpha.user), _watchdog(alpha))
    assert created.status_code == 201, created.json()
    rule = created.json()
    assert (rule["operator"], rule["threshold_value"], rule["priority"]) == (
        "silent_for",
        600,
        1000,
    )
    assert rule["alarm_severity"] == ""
    given = _post(token_client(alpha.user), _watchdog(alpha, priority=5, alarm_severity="minor"))
    assert (given.json()["priority"], given.json()["alarm_severity"]) == (5, "minor")


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"threshold_value": 0}, "threshold_value"),
        ({"threshold_value": -60}, "threshold_value"),
        ({"threshold_value": 1.5}, "threshold_value"),
        ({"threshold_value": "600"}, "threshold_value"),
        ({"threshold_value": True}, "threshold_value"),
        ({"threshold_value": 7 * 86400 + 1}, "threshold_value"),
        ({"threshold_value_high": 900}, "threshold_value_high"),
        ({"alarm_severity": "loud"}, "alarm_severity"),
    ],
)
def test_bad_input_is_a_400_naming_the_field_and_writes_nothing(
    tenants: tuple[Tenant, Tenant], overrides: dict[str, Any], field: str
) -> None:
    alpha, _ = tenants
    refused = _post(token_client(alpha.user), _watchdog(alpha, **overrides))
    assert refused.status_code == 400, refused.json()
    assert field in refused.json()["fields"], refused.json()
    assert not AutomationRule.objects.exists()


def test_a_watchdog_on_an_endpoint_of_another_farm_is_refused(
    tenants: tuple[Tenant, Tenant],
) -> None:
    alpha, beta = tenants
    other = make_farm(farm=FarmFactory(organization=alpha.kit.farm.organization))
    client = token_client(alpha.user)
    for endpoint in (other.temp.pk, beta.kit.temp.pk):  # our other farm; another organisation
        refused = _post(client, _watchdog(alpha, trigger_endpoint=endpoint))
        assert refused.status_code == 400, refused.json()
        assert list(refused.json()["fields"]) == ["trigger_endpoint"], refused.json()
    assert not AutomationRule.objects.exists()


def test_silent_for_is_a_trigger_condition_only(tenants: tuple[Tenant, Tenant]) -> None:
    alpha, _ = tenants
    client = token_client(alpha.user)
    condition = {"endpoint": alpha.kit.humidity.pk, "operator": "silent_for", "threshold_value": 60}
    refused = _post(
        client,
        _watchdog(
            alpha, operator="gt", threshold_value=30, target_value=True, conditions=[condition]
        ),
    )
    assert refused.status_code == 400
    assert "silent_for" in refused.json()["fields"]["conditions"][0]["operator"][0]
    further = {"endpoint": alpha.kit.humidity.pk, "operator": "gt", "threshold_value": 80}
    refused = _post(client, _watchdog(alpha, conditions=[further]))
    assert refused.status_code == 400 and "conditions" in refused.json()["fields"]
    assert not AutomationRule.objects.exists()


def test_the_admin_refuses_a_bad_silence_and_defaults_a_watchdogs_priority(client: Client) -> None:
    kit = make_farm()
    User.objects.create_superuser("support", "s@example.com", "pw")
    client.login(username="support", password="pw")
    form = {
        "farm": kit.farm.pk,
        "name": "heater off",
        "trigger_endpoint": kit.temp.pk,
        "operator": "silent_for",
        "threshold_value": "0",
        "threshold_value_high": "",
        "target_endpoint": kit.io1.pk,
        "target_value": "false",
        "alarm_severity": "",
        "is_active": "on",
    }
    page = client.post("/admin/automation/automationrule/add/", form)
    assert page.status_code == 200 and "threshold_value" in page.content.decode()
    assert not AutomationRule.objects.exists()
    form["alarm_severity"] = "loud"
    form["threshold_value"] = "600"
    page = client.post("/admin/automation/automationrule/add/", form)
    assert page.status_code == 200 and not AutomationRule.objects.exists()
    form["alarm_severity"] = "warning"
    assert client.post("/admin/automation/automationrule/add/", form).status_code == 302
    rule = AutomationRule.objects.get()
    assert (rule.threshold_value, rule.priority, rule.alarm_severity) == (600, 1000, "warning")


def _reading(serial: str, ts: str, **values: object) -> None:
    payload = json.dumps({"ts": ts, "values": values})
    ids = telemetry_ingest(messages=[InboundTelemetry(serial, payload, FIXTURE_NOW)])
    endpoint_events_evaluate(event_ids=ids.pending_event_ids)


def test_a_rule_with_a_severity_raises_its_alarm_once_and_clears_it_when_false() -> None:
    kit = make_farm()
    hot = kit.rule(operator="gt", threshold_value=30, target_value=True, alarm_severity="minor")
    quiet = kit.rule(trigger_endpoint=kit.humidity, operator="gt", threshold_value=80)
    serial = kit.sensor.serial_number
    _reading(serial, "2026-11-29T11:50:00Z", temp=31, humidity=90)
    _reading(serial, "2026-11-29T11:51:00Z", temp=32)  # still firing: the same alarm
    alarm = Alarm.objects.get()
    assert (alarm.source, alarm.source_id, alarm.type) == ("rule", hot.pk, "rule_alarm")
    assert (alarm.severity, alarm.status, alarm.count) == ("minor", AlarmStatus.ACTIVE, 1)
    _reading(serial, "2026-11-29T11:52:00Z", temp=25)  # false again: cleared by its cause
    alarm.refresh_from_db()
    assert (alarm.status, alarm.cleared_by) == (AlarmStatus.CLEARED, CONDITION_FALSE)
    _reading(serial, "2026-11-29T11:53:00Z", temp=24)
    _reading(serial, "2026-11-29T11:54:00Z", temp=33)  # fires again: a new alarm
    assert list(Alarm.objects.order_by("pk").values_list("status", flat=True)) == [
        AlarmStatus.CLEARED,
        AlarmStatus.ACTIVE,
    ]
    assert not Alarm.objects.filter(source_id=quiet.pk).exists()  # no severity, no alarm
