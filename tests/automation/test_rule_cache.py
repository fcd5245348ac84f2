"""The configuration a reading is decided by is kept per process behind the configuration
version (``common.config_version``, ``automation.services.rule_cache``): evaluation reads no
rule while nothing changed, every configuration write moves the version in its transaction
(API, admin, a queryset update alike), a reading does not, and a rule edited through the API
is obeyed by the very next reading."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from django.db import transaction
from django.test import Client
from django.utils import timezone

from automation.models import (
    AutomationRule,
    AutomationRuleAction,
    AutomationRuleCondition,
    AutomationRuleSchedule,
)
from automation.services.evaluate import EvaluateResult, endpoint_events_evaluate
from automation.services.ingest import telemetry_ingest
from automation.services.rule_cache import rule_set_loads
from common.config_version import (
    config_tables,
    config_version,
    config_version_triggers_installed,
)
from common.hot_sql import statements_counted
from devices.models import (
    Device,
    DeviceInstanceEndpoint,
    DeviceProfile,
    DeviceProfileEndpoint,
    DeviceStatus,
    Farm,
)
from devices.mqtt.messages import InboundTelemetry
from devices.services.health import devices_heard_from
from reminders.models import EndpointMetricSource
from tests.common.auth import token_client
from tests.conftest import Tenant
from tests.devices.factories import FarmKit, make_farm

pytestmark = pytest.mark.django_db

CONFIGURATION = (
    Farm,
    DeviceProfile,
    DeviceProfileEndpoint,
    Device,
    DeviceInstanceEndpoint,
    AutomationRule,
    AutomationRuleCondition,
    AutomationRuleAction,
    AutomationRuleSchedule,
    EndpointMetricSource,  # which endpoints' readings wait for evaluation
)
RULE_TABLES = tuple(m._meta.db_table for m in CONFIGURATION[5:9])


def _reading(kit: FarmKit, temp: float, *, ago_s: float = 0) -> EvaluateResult:
    ts = (timezone.now() - timedelta(seconds=ago_s)).isoformat()
    payload = json.dumps({"ts": ts, "values": {"temp": temp}})
    events = telemetry_ingest(
        messages=[InboundTelemetry(kit.sensor.serial_number, payload, timezone.now())]
    ).pending_event_ids
    return endpoint_events_evaluate(event_ids=events)


def test_every_configuration_table_has_its_triggers() -> None:
    """A migration that rebuilds a table (SQLite does to alter one) drops its triggers:
    ``migrate`` installs them again, and this catches a table left without."""
    watched = {t.table for t in config_tables()}
    assert watched == {m._meta.db_table for m in CONFIGURATION}
    assert watched <= config_version_triggers_installed()


def test_a_rule_edited_through_the_api_is_obeyed_by_the_next_reading(
    tenants: tuple[Tenant, Tenant],
) -> None:
    kit = tenants[0].kit
    client = token_client(tenants[0].user)
    rule = kit.rule(threshold_value=30, target_value=True)
    assert _reading(kit, 25, ago_s=3).outcomes == {}  # below 30: the cache now holds the rule
    loads = rule_set_loads()
    assert _reading(kit, 26, ago_s=2).outcomes == {}
    assert rule_set_loads() == loads  # nothing changed: no rule read
    patched = client.patch(f"/api/v1/rules/{rule.pk}/", {"threshold_value": 20}, format="json")
    assert patched.status_code == 200, patched.content
    assert _reading(kit, 27, ago_s=1).pending_command_ids  # 27 > 20: the edit decides
    assert rule_set_loads() == loads + 1


def test_a_second_batch_reads_no_rule_condition_or_action() -> None:
    kit = make_farm(prefix="quiet")
    kit.rule(threshold_value=30, target_value=True)
    AutomationRuleCondition.objects.create(
        rule=AutomationRule.objects.get(), endpoint=kit.humidity, operator="gt", threshold_value=0
    )
    _reading(kit, 25, ago_s=2)
    with statements_counted() as counted:
        _reading(kit, 26, ago_s=1)
    evaluated = [*counted.hot, *counted.orm]
    read = [sql for sql in evaluated if any(re.search(rf"\b{t}\b", sql) for t in RULE_TABLES)]
    assert not read, read


def _moves(write: Callable[[], Any]) -> bool:
    before = config_version()
    write()
    return config_version() != before


def test_readings_and_device_touches_move_nothing() -> None:
    kit = make_farm(prefix="touch")
    kit.rule(threshold_value=30, target_value=True)
    assert not _moves(lambda: _reading(kit, 35))
    assert not _moves(lambda: devices_heard_from(device_ids=[kit.sensor.pk], now=timezone.now()))


def test_a_rolled_back_move_is_never_handed_out_again() -> None:
    kit = make_farm(prefix="undo")
    before = config_version()
    with pytest.raises(RuntimeError), transaction.atomic():
        Farm.objects.filter(pk=kit.farm.pk).update(name="renamed")
        inside = config_version()
        raise RuntimeError
    assert config_version() == before
    Farm.objects.filter(pk=kit.farm.pk).update(name="renamed again")
    assert config_version() not in (before, inside)


def test_every_api_configuration_write_moves_the_version(tenants: tuple[Tenant, Tenant]) -> None:
    kit = tenants[0].kit
    client = token_client(tenants[0].user)
    rule = kit.rule(threshold_value=30, target_value=True)
    writes: dict[str, Callable[[], Any]] = {
        "farm": lambda: client.patch(f"/api/v1/farms/{kit.farm.pk}/", {"name": "North"}),
        "profile": lambda: client.patch(
            f"/api/v1/profiles/{kit.sensor.profile_id}/", {"name": "Sensor v2"}
        ),
        "profile endpoints": lambda: client.post(
            f"/api/v1/profiles/{kit.sensor.profile_id}/endpoints/",
            {"endpoints": [{"key": "co2", "data_type": "number"}]},
            format="json",
        ),
        "device status": lambda: client.post(
            f"/api/v1/devices/{kit.actuator.pk}/status/",
            {"status": DeviceStatus.MAINTENANCE},
            format="json",
        ),
        "endpoint": lambda: client.patch(
            f"/api/v1/endpoints/{kit.mode.pk}/", {"is_enabled": False}, format="json"
        ),
        "rule": lambda: client.patch(
            f"/api/v1/rules/{rule.pk}/", {"threshold_value": 20}, format="json"
        ),
        "rule conditions": lambda: client.patch(
            f"/api/v1/rules/{rule.pk}/",
            {"conditions": [{"endpoint": kit.humidity.pk, "operator": "gt", "threshold_value": 1}]},
            format="json",
        ),
        "rule delete": lambda: client.delete(f"/api/v1/rules/{rule.pk}/"),
    }
    for name, write in writes.items():
        before = config_version()
        answer = write()
        assert answer.status_code < 300, (name, answer.content)
        assert config_version() != before, name


RULE_URL = "/admin/automation/automationrule/"


def test_every_admin_configuration_write_moves_the_version(support: Client) -> None:
    kit = make_farm(prefix="admin")
    rule_form = {
        "farm": kit.farm.pk,
        "name": "vent",
        "trigger_endpoint": kit.temp.pk,
        "operator": "gt",
        "threshold_value": "30",
        "threshold_value_high": "",
        "target_endpoint": kit.io1.pk,
        "target_value": "true",
        "is_active": "on",
    }
    farm_form = {
        "organization": kit.farm.organization_id,
        "name": "renamed",
        "time_zone": kit.farm.time_zone,
        "manual_override_minutes": "5",
    }
    writes: dict[str, Callable[[], Any]] = {
        "rule added": lambda: support.post(f"{RULE_URL}add/", rule_form),
        "farm changed": lambda: support.post(
            f"/admin/devices/farm/{kit.farm.pk}/change/", farm_form
        ),
    }
    for name, write in writes.items():
        before = config_version()
        answer = write()
        assert answer.status_code == 302, (name, answer.content[:2000])
        assert config_version() != before, name
    rule = AutomationRule.objects.get()
    before = config_version()
    edit = support.post(f"{RULE_URL}{rule.pk}/change/", rule_form | {"threshold_value": "31"})
    assert edit.status_code == 302
    assert config_version() != before
