"""Reminder and report inputs are bounded to what the schedule arithmetic can compute with:
offsets are whole days from 0 (on the expiry) to OFFSET_DAYS_MAX, a send time is local (no
UTC offset), a report period lies within DATE_MIN..DATE_MAX, a farm's zone is an IANA zone.
Each is a 400 naming the field, never a 500; and one setting that still cannot be computed
(written before the bounds) stops only itself, not the farm's other settings."""

from __future__ import annotations

import logging
from datetime import UTC, date, time
from typing import Any

import pytest
from django.core.exceptions import ValidationError

from devices.models import Farm
from reminders.models import OFFSET_DAYS_MAX, ReminderSetting, ReportManualRun, ReportSubscription
from reminders.services.handlers import reminder_source_changed
from reminders.services.settings import ReminderSettingInvalid
from reminders.services.sources import SourceInvalid
from tests.conftest import Tenant
from tests.notifications.test_support import _client
from tests.reminders.conftest import NOW, date_setting, document, rows_of
from tests.reminders.test_api import _subscription

pytestmark = pytest.mark.django_db

SETTINGS = "/api/v1/reminder-settings/"


def _setting_body(t: Tenant, **overrides: Any) -> dict[str, Any]:
    body = {
        "name": "Certificates",
        "farm": t.kit.farm.pk,
        "source_type": "document",
        "trigger_type": "date_based",
        "offsets_days": [30, 7],
        "send_time": "09:00",
        "template_name": "document_expiry",
        "channels": ["email"],
    }
    return body | overrides


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"offsets_days": [1_000_000]}, "offsets_days"),  # was 201, then OverflowError
        ({"offsets_days": [OFFSET_DAYS_MAX + 1]}, "offsets_days"),
        ({"offsets_days": [-3]}, "offsets_days"),  # would remind three days after expiry
        ({"offsets_days": list(range(21))}, "offsets_days"),
        ({"send_time": "09:00+02:00"}, "send_time"),  # the offset was silently dropped
        ({"send_time": "07:00Z"}, "send_time"),
    ],
)
def test_a_setting_outside_the_bounds_is_a_400(
    tenants: tuple[Tenant, Tenant], overrides: dict[str, Any], field: str
) -> None:
    alpha, _ = tenants
    response = _client(alpha.user).post(SETTINGS, _setting_body(alpha, **overrides), "json")
    assert response.status_code == 400, response.json()
    assert list(response.json()["fields"]) == [field]
    assert not ReminderSetting.objects.exists()


def test_the_bounds_hold_on_the_edges_and_in_the_services(tenants: tuple[Tenant, Tenant]) -> None:
    alpha, _ = tenants
    body = _setting_body(alpha, offsets_days=[OFFSET_DAYS_MAX, 0], send_time="23:59:59")
    assert _client(alpha.user).post(SETTINGS, body, "json").status_code == 201
    for bad in ({"offsets_days": [-1]}, {"send_time": time(9, 0, tzinfo=UTC)}):
        with pytest.raises(ReminderSettingInvalid):
            date_setting(alpha.kit.farm, **bad)
    with pytest.raises(ValidationError) as refused:
        ReminderSetting(offsets_days=[-3], send_time=time(9, tzinfo=UTC)).clean_fields()
    assert {"offsets_days", "send_time"} <= set(refused.value.message_dict)
    with pytest.raises(SourceInvalid):
        document(alpha.kit.farm, date(1, 1, 1))


def test_one_setting_that_cannot_be_computed_stops_only_itself(
    farm: Farm, bus: Any, caplog: pytest.LogCaptureFixture
) -> None:
    with bus.commit():
        good = date_setting(farm, name="good")
        bad = date_setting(farm, name="bad", offsets_days=[3])
    # Written before offsets were bounded: the arithmetic overflows for this one setting.
    ReminderSetting.objects.filter(pk=bad.pk).update(offsets_days=[1_000_000])
    with caplog.at_level(logging.ERROR), bus.commit():
        doc = document(farm, date(2026, 6, 30))
    assert not any(d.retry_needed for d in bus.delivered)
    tails = {row.tail for row in rows_of(doc.guid)}
    assert tails == {"expiry:2026-06-30:30", "expiry:2026-06-30:7"}  # the good setting's rows
    failed = [r for r in caplog.records if r.getMessage().startswith("REMINDER_SETTING_FAILED")]
    assert [r.settingId for r in failed] == [str(bad.guid)]  # type: ignore[attr-defined]
    assert good.guid != bad.guid


def test_a_failing_setting_keeps_its_open_rows(farm: Farm, bus: Any) -> None:
    with bus.commit():
        setting = date_setting(farm, offsets_days=[3])
        doc = document(farm, date(2026, 6, 30))
    assert {row.tail: row.status for row in rows_of(doc.guid)} == {"expiry:2026-06-30:3": "pending"}
    ReminderSetting.objects.filter(pk=setting.pk).update(offsets_days=[1_000_000])
    result = reminder_source_changed(source_type="document", source_guid=doc.guid, now=NOW)
    assert [f.setting_guid for f in result.failures] == [setting.guid]
    assert {row.tail: row.status for row in rows_of(doc.guid)} == {"expiry:2026-06-30:3": "pending"}


@pytest.mark.parametrize("day", ["0001-01-01", "9999-12-31", "1969-12-31", "3000-01-01"])
def test_a_report_period_outside_the_calendar_bounds_is_a_400(
    tenants: tuple[Tenant, Tenant], day: str
) -> None:
    alpha, _ = tenants
    sub = _subscription(alpha.kit.farm)
    url = f"/api/v1/report-subscriptions/{sub.pk}/run/"
    response = _client(alpha.user).post(url, {"period_start": day}, format="json")
    assert response.status_code == 400, response.json()
    assert list(response.json()["fields"]) == ["period_start"]
    assert not ReportManualRun.objects.exists()
    edge = _client(alpha.user).post(url, {"period_start": "2999-12-31"}, format="json")
    assert edge.status_code == 201


def test_a_farm_zone_must_exist(tenants: tuple[Tenant, Tenant], support: Any) -> None:
    alpha, _ = tenants
    add = {
        "organization": alpha.kit.farm.organization_id,
        "name": "Mars",
        "time_zone": "Mars/Olympus",
    }
    page = support.post("/admin/devices/farm/add/", add)
    assert page.status_code == 200 and "not an IANA time zone" in page.content.decode()
    assert not Farm.objects.filter(name="Mars").exists()
    with pytest.raises(ValidationError):
        Farm(
            organization=alpha.kit.farm.organization, name="M", time_zone="Mars/Olympus"
        ).full_clean()
    # A farm written before zones were checked: its schedules are a 400, not a 500.
    Farm.objects.filter(pk=alpha.kit.farm.pk).update(time_zone="Mars/Olympus")
    client = _client(alpha.user)
    body = {
        "farm": alpha.kit.farm.pk,
        "name": "Weekly",
        "recurrence": "weekly",
        "send_time": "08:00",
        "channels": ["email"],
    }
    created = client.post("/api/v1/report-subscriptions/", body, format="json")
    assert created.status_code == 400 and list(created.json()["fields"]) == ["farm"]
    assert not ReportSubscription.objects.exists()
    setting = client.post(SETTINGS, _setting_body(alpha), format="json")
    assert setting.status_code == 400 and list(setting.json()["fields"]) == ["farm"]
