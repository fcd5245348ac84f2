"""A report lists each endpoint's readings over its period from the hourly rollups: a monthly
report run after the month's raw telemetry was pruned still counts every reading of the
month in the farm's calendar, and none from either side of it."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from devices.models import Telemetry
from notifications.services.context import context_decode
from notifications.services.render import notification_render
from tests.devices.factories import FarmKit
from tests.devices.test_rollups import fold, store
from tests.reminders.conftest import notifications_for, run_due
from tests.reminders.test_reports import report_rows, subscribe

pytestmark = pytest.mark.django_db


def _utc(*args: int) -> datetime:
    return datetime(*args, tzinfo=UTC)


def test_a_monthly_report_reads_the_month_from_rollups_after_raw_telemetry_expired(
    kit: FarmKit,
) -> None:
    sub = subscribe(kit.farm, recurrence="monthly", name="Monthly summary")
    for day in range(1, 32):  # March 2026, one reading a day at noon
        store(kit.sensor, _utc(2026, 3, day, 12), {"temp": float(day), "humidity": 40 + day % 2})
        store(kit.actuator, _utc(2026, 3, day, 12), {"io1": day % 4 == 0})
    # 23:30 on 28 February and 00:10 on 1 April in Berlin: outside the farm's March.
    store(kit.sensor, _utc(2026, 2, 28, 22, 30), {"temp": 1000.0})
    store(kit.sensor, _utc(2026, 3, 31, 22, 10), {"temp": -1000.0})
    fold(clock=lambda: _utc(2026, 4, 1, 4))
    Telemetry.objects.all().delete()  # the raw rows are past their retention

    assert run_due(_utc(2026, 4, 1, 5)) == {"completed": 1}  # 07:00 CEST on 1 April
    (note,) = notifications_for(report_rows(sub)[0].scheduler_key)
    csv = note.attachments[0]["content"].splitlines()
    sensor, relay = kit.sensor.serial_number, kit.actuator.serial_number
    for line in [
        f"readings_count,{sensor}/temp,31",
        f"readings_min,{sensor}/temp,1",
        f"readings_avg,{sensor}/temp,16",
        f"readings_max,{sensor}/temp,31",
        f"readings_avg,{sensor}/humidity,40.5161",
        f"readings_count,{relay}/io1,31",
        f"readings_avg,{relay}/io1,0.225806",  # true on 7 of 31 days
    ]:
        assert line in csv, line
    assert not any("/mode," in line for line in csv)  # enums are not rolled up
    readings = {(r["device_serial"], r["endpoint_key"]): r for r in note.context["readings"]}
    assert readings[(sensor, "temp")]["count"] == 31
    assert readings[(sensor, "temp")]["max"] == 31.0
    body = _body(note.context)
    assert f"  {sensor}/temp: 31, 1 / 16 / 31\n" in body
    assert f"  {sensor}/humidity: 31, 40 / 40.516 / 41\n" in body
    assert f"  {relay}/io1: 31, 0 / 0.226 / 1\n" in body


def _body(context: dict[str, Any]) -> str:
    return notification_render(
        template_name="farm_report",
        context=context_decode(context),
        locale="en",
        time_zone="Europe/Berlin",
    ).body


def test_a_period_without_readings_lists_none(kit: FarmKit) -> None:
    sub = subscribe(kit.farm)
    store(kit.sensor, _utc(2026, 3, 1, 12) - timedelta(days=1), {"temp": 5.0})
    fold()
    assert run_due(_utc(2026, 3, 3, 6)) == {"completed": 1}
    (note,) = notifications_for(report_rows(sub)[0].scheduler_key)
    assert "readings" not in note.attachments[0]["content"]
    assert note.context["readings"] == []
    assert "Readings (count, min / avg / max):\n  none\n" in _body(note.context)
