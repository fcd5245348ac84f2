"""The read of device replies (``automation.services.receipts_sql``) reads what the ORM
reads: a command by its id or by the commandId a device echoes, and with it, when asked,
its device's endpoints with their profile endpoints."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import models
from django.utils import timezone

from automation.models import DeviceCommand
from automation.services.receipts_sql import replied_commands_read
from devices.models import DeviceInstanceEndpoint
from tests.automation.conftest import dispatch, make_intent
from tests.devices.factories import make_farm

pytestmark = pytest.mark.django_db


def _columns(row: models.Model) -> list[object]:
    return [getattr(row, f.attname) for f in row._meta.concrete_fields]


def test_a_command_is_read_by_id_or_command_id_with_its_devices_endpoints() -> None:
    kit = make_farm(prefix="rsql-a")
    kit.rule(threshold_value=30, target_value=True)
    ts = (timezone.now() - timedelta(seconds=5)).isoformat()
    command = dispatch(make_intent(kit, ts=ts))
    orm = DeviceCommand.objects.get(pk=command.pk)
    assert orm.device_command_id

    by_id = replied_commands_read("id", [command.pk], endpoints=False)
    by_command_id = replied_commands_read(
        "device_command_id", [orm.device_command_id], endpoints=True
    )

    assert [_columns(r.command) for r in by_id] == [_columns(orm)]
    assert by_id[0].endpoints == []
    assert [_columns(r.command) for r in by_command_id] == [_columns(orm)]
    endpoints = DeviceInstanceEndpoint.objects.filter(device=kit.actuator).select_related(
        "profile_endpoint"
    )
    read = {e.pk: e for e in by_command_id[0].endpoints}
    assert sorted(read) == sorted(e.pk for e in endpoints)
    for endpoint in endpoints:
        assert _columns(read[endpoint.pk]) == _columns(endpoint)
        assert _columns(read[endpoint.pk].profile_endpoint) == _columns(endpoint.profile_endpoint)
    assert replied_commands_read("device_command_id", ["no-such-command"], endpoints=True) == []
