"""The alarms admin: the list shows each alarm's severity in its colour and filters by
severity; acknowledge and clear are actions that first ask for a comment, then move the
alarm through the services, audited with the support user's name; a device's page lists
its open alarms."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from django.test import Client

from alarms.admin import SEVERITY_COLOURS
from alarms.models import Alarm, AlarmTransition
from alarms.services import alarm_clear, alarm_raise
from tests.devices.factories import DeviceFactory, FarmFactory

pytestmark = pytest.mark.django_db
URL = "/admin/alarms/alarm/"
NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


def _raise(source_id: int, severity: str) -> int:
    farm = FarmFactory()
    return alarm_raise(
        farm_id=farm.pk,
        source="device",
        source_id=source_id,
        type="device_offline",
        severity=severity,
        actor="device health",
        now=NOW,
    )


def _act(client: Client, action: str, ids: list[int], comment: str | None) -> Any:
    data: dict[str, Any] = {"action": action, "_selected_action": [str(i) for i in ids]}
    if comment is not None:
        data.update(apply="1", reason=comment)
    return client.post(URL, data, follow=True)


def test_the_list_colours_severities_and_filters_by_them(support: Client) -> None:
    _raise(1, "critical")
    _raise(2, "warning")
    page = support.get(URL)
    assert page.status_code == 200
    assert SEVERITY_COLOURS["critical"].encode() in page.content
    assert SEVERITY_COLOURS["warning"].encode() in page.content
    only = support.get(URL, {"severity__exact": "critical"})
    assert b"device:1" in only.content and b"device:2" not in only.content


def test_acknowledge_asks_a_comment_first_then_moves_through_the_service(
    support: Client,
) -> None:
    alarm_id = _raise(1, "major")
    asked = _act(support, "acknowledge", [alarm_id], None)
    assert b'name="reason"' in asked.content
    assert Alarm.objects.get(pk=alarm_id).status == "active"
    _act(support, "acknowledge", [alarm_id], "looking at it")
    _act(support, "clear", [alarm_id], "sensor replaced")
    trail = AlarmTransition.objects.filter(alarm_id=alarm_id).order_by("pk")
    assert [(t.to_status, t.actor, t.comment) for t in trail][1:] == [
        ("acknowledged", "support", "looking at it"),
        ("cleared", "support", "sensor replaced"),
    ]


def test_a_devices_page_lists_its_open_alarms_and_keeps_automations_parts(
    support: Client,
) -> None:
    device = DeviceFactory()
    alarm_id = alarm_raise(
        farm_id=device.farm_id,
        source="device",
        source_id=device.pk,
        type="device_offline",
        severity="major",
        actor="device health",
        now=NOW,
    )
    page = support.get(f"/admin/devices/device/{device.pk}/change/")
    assert page.status_code == 200
    assert f"/admin/alarms/alarm/{alarm_id}/change/".encode() in page.content
    assert b"Open commands" in page.content  # automation's part of the page stays
    alarm_clear(alarm_id=alarm_id, actor="support", comment="fixed", now=NOW)
    page = support.get(f"/admin/devices/device/{device.pk}/change/")
    assert f"/admin/alarms/alarm/{alarm_id}/change/".encode() not in page.content
