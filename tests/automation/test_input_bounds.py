"""JSON nested past the bound, in a rule or in telemetry over HTTP or MQTT, is refused with a
4xx or a recorded rejection (``json_too_deep``), never a 500 ``RecursionError``, and nothing is
half-written."""

from __future__ import annotations

import json

import pytest
from django.core.exceptions import ValidationError
from django.utils import timezone

from automation.models import AutomationRule
from automation.services.ingest import telemetry_ingest
from automation.services.receipts import device_messages_record
from common.validators import JSON_MAX_DEPTH
from devices.models import DeviceMessageRejection, Telemetry
from devices.mqtt.messages import DeviceMessage, InboundTelemetry
from tests.automation.test_api import _client, _rule
from tests.common.test_json_bounds import nested
from tests.conftest import Tenant

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("clock_at_fixture_dates")]


def _deep_text(depth: int) -> str:
    return "[" * depth + "1" + "]" * depth


def test_a_rule_value_nested_1000_deep_is_a_400(tenants: tuple[Tenant, Tenant]) -> None:
    alpha, _ = tenants
    client = _client(alpha.user)
    body = json.dumps(_rule(alpha)).replace(
        '"threshold_value": 30', '"threshold_value": ' + _deep_text(1000)
    )
    response = client.post("/api/v1/rules/", body, content_type="application/json")
    assert response.status_code == 400 and response.json()["code"] == "parse_error"
    deeper = _rule(alpha, threshold_value=nested(JSON_MAX_DEPTH + 1))
    response = client.post("/api/v1/rules/", deeper, format="json")
    assert response.status_code == 400
    assert "nested deeper" in response.json()["fields"]["threshold_value"][0]
    assert not AutomationRule.objects.exists()


def test_the_admin_path_refuses_a_deep_rule_value(tenants: tuple[Tenant, Tenant]) -> None:
    alpha, _ = tenants
    rule = AutomationRule(
        farm=alpha.kit.farm,
        name="deep",
        trigger_endpoint=alpha.kit.temp,
        operator="gt",
        threshold_value=nested(JSON_MAX_DEPTH + 1),
        target_endpoint=alpha.kit.fan,
        target_value=80,
    )
    with pytest.raises(ValidationError) as refused:
        rule.full_clean()
    assert "threshold_value" in refused.value.message_dict


def test_http_telemetry_nested_too_deep_is_refused(tenants: tuple[Tenant, Tenant]) -> None:
    alpha, _ = tenants
    client = _client(alpha.user)
    serial = alpha.kit.sensor.serial_number
    as_object = {"messages": [{"serial": serial, "payload": {"values": {"temp": nested(20)}}}]}
    response = client.post("/api/v1/telemetry/", as_object, format="json")
    assert response.status_code == 400, response.json()
    assert "messages" in response.json()["fields"]
    as_text = {
        "messages": [{"serial": serial, "payload": '{"values":{"temp":' + _deep_text(1000) + "}}"}]
    }
    response = client.post("/api/v1/telemetry/", as_text, format="json")
    assert response.status_code == 422
    assert [r["reason"] for r in response.json()["rejected"]] == ["json_too_deep"]
    assert not Telemetry.objects.exists()


@pytest.mark.parametrize("depth", [JSON_MAX_DEPTH + 1, 900, 5000])
def test_mqtt_telemetry_and_replies_too_deep_are_recorded(
    tenants: tuple[Tenant, Tenant], depth: int
) -> None:
    alpha, _ = tenants
    serial = alpha.kit.sensor.serial_number
    now = timezone.now()
    payload = '{"values":{"temp":' + _deep_text(depth) + "}}"
    telemetry_ingest(messages=[InboundTelemetry(serial, payload, now)])
    state = '{"commandId":"cmd-1","appliedAt":"2026-11-29T11:59:00Z","reportedState":{"io1":'
    state += _deep_text(depth) + "}}"
    device_messages_record(messages=[DeviceMessage(serial, "state", state, now, False)])
    reasons = DeviceMessageRejection.objects.values_list("kind", "reason_code")
    assert sorted(reasons) == [("state", "json_too_deep"), ("telemetry", "json_too_deep")]
    assert not Telemetry.objects.exists()
