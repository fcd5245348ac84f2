"""Device health where people see it: the device API shows ``online`` and ``last_seen_at``
and filters by ``?online=``; a device's ``offline_after_s`` and a profile's
``expected_interval_s`` are positive (zero or below is a 400 naming the field, nothing
written) and an edit, in the API or the admin, moves the offline time; the admin lists and
filters by online; ``/metrics`` counts the devices offline."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.utils import timezone
from prometheus_client.parser import text_string_to_metric_families
from rest_framework.test import APIClient

from common.models import MemberRole, OrganizationMember
from devices.models import Device, DeviceProfile, DeviceStatus
from devices.services import devices_heard_from, devices_offline_sweep
from tests.common.auth import token_client
from tests.conftest import Tenant
from tests.devices.factories import DeviceFactory, DeviceProfileFactory

pytestmark = pytest.mark.django_db
T0 = datetime(2026, 12, 1, 8, 0, tzinfo=timezone.get_current_timezone())


def _admin(tenant: Tenant) -> APIClient:
    OrganizationMember.objects.filter(user=tenant.user).update(role=MemberRole.ADMIN)
    return token_client(tenant.user)


def _silent_sensor(tenant: Tenant) -> tuple[Device, Device]:
    """The tenant's sensor offline (heard from at T0, swept a day later), its actuator online."""
    sensor, actuator = tenant.kit.sensor, tenant.kit.actuator
    devices_heard_from(device_ids=[sensor.pk], now=T0)
    devices_offline_sweep(now=T0 + timedelta(days=1), batch=100)
    devices_heard_from(device_ids=[actuator.pk], now=timezone.now())
    return sensor, actuator


def test_the_api_shows_and_filters_by_online(tenants: tuple[Tenant, Tenant]) -> None:
    alpha, _ = tenants
    sensor, actuator = _silent_sensor(alpha)
    client = _admin(alpha)
    rows = {d["id"]: d for d in client.get("/api/v1/devices/").json()["results"]}
    assert rows[sensor.pk]["online"] is False
    assert rows[actuator.pk]["online"] is True
    assert datetime.fromisoformat(rows[sensor.pk]["last_seen_at"]) == T0
    online = client.get("/api/v1/devices/?online=true").json()["results"]
    assert [d["id"] for d in online] == [actuator.pk]
    offline = client.get("/api/v1/devices/?online=false").json()["results"]
    assert [d["id"] for d in offline] == [sensor.pk]
    assert client.get("/api/v1/devices/?online=maybe").status_code == 400


@pytest.mark.parametrize("value", [0, -5, "soon"])
def test_a_device_window_below_one_second_is_a_400_naming_it(
    tenants: tuple[Tenant, Tenant], value: Any
) -> None:
    alpha, _ = tenants
    device = alpha.kit.sensor
    answer = _admin(alpha).patch(
        f"/api/v1/devices/{device.pk}/", {"offline_after_s": value}, format="json"
    )
    assert answer.status_code == 400, answer.content
    assert "offline_after_s" in answer.json()["fields"]
    device.refresh_from_db()
    assert device.offline_after_s is None


def test_a_devices_window_is_set_and_moves_its_offline_time(
    tenants: tuple[Tenant, Tenant],
) -> None:
    alpha, _ = tenants
    device = alpha.kit.sensor
    devices_heard_from(device_ids=[device.pk], now=T0)
    client = _admin(alpha)
    url = f"/api/v1/devices/{device.pk}/"
    answer = client.patch(url, {"offline_after_s": 45}, format="json")
    assert answer.status_code == 200, answer.content
    assert answer.json()["offline_after_s"] == 45
    device.refresh_from_db()
    assert device.offline_due_at == T0 + timedelta(seconds=45)
    assert client.patch(url, {"offline_after_s": None}, format="json").status_code == 200
    device.refresh_from_db()
    assert device.offline_due_at == T0 + timedelta(seconds=180)  # 3 x the profile's 60 s
    refused = client.patch(url, {"online": True}, format="json")
    assert "online" in refused.json()["fields"]


@pytest.mark.parametrize("value", [0, -1])
def test_a_profile_interval_below_one_second_is_a_400_naming_it(
    tenants: tuple[Tenant, Tenant], value: int
) -> None:
    alpha, _ = tenants
    client = _admin(alpha)
    body = {
        "organization": alpha.kit.farm.organization_id,
        "name": "Quick",
        "expected_interval_s": value,
    }
    made = client.post("/api/v1/profiles/", body, format="json")
    assert made.status_code == 400, made.content
    assert "expected_interval_s" in made.json()["fields"]
    assert not DeviceProfile.objects.filter(name="Quick").exists()
    profile = alpha.kit.sensor.profile
    changed = client.patch(
        f"/api/v1/profiles/{profile.pk}/", {"expected_interval_s": value}, format="json"
    )
    assert changed.status_code == 400
    assert "expected_interval_s" in changed.json()["fields"]
    profile.refresh_from_db()
    assert profile.expected_interval_s == 60


def test_a_profile_interval_is_set_and_moves_its_devices_offline_times(
    tenants: tuple[Tenant, Tenant],
) -> None:
    alpha, _ = tenants
    client = _admin(alpha)
    body = {
        "organization": alpha.kit.farm.organization_id,
        "name": "Slow",
        "expected_interval_s": 600,
    }
    made = client.post("/api/v1/profiles/", body, format="json")
    assert made.status_code == 201, made.content
    assert made.json()["expected_interval_s"] == 600
    sensor = alpha.kit.sensor
    devices_heard_from(device_ids=[sensor.pk], now=T0)
    url = f"/api/v1/profiles/{sensor.profile_id}/"
    answer = client.patch(url, {"expected_interval_s": 20}, format="json")
    assert answer.status_code == 200, answer.content
    assert answer.json()["expected_interval_s"] == 20
    sensor.refresh_from_db()
    assert sensor.offline_due_at == T0 + timedelta(seconds=60)


def test_metrics_count_the_devices_offline(tenants: tuple[Tenant, Tenant]) -> None:
    alpha, beta = tenants
    _silent_sensor(alpha)
    _silent_sensor(beta)
    retired = beta.kit.sensor
    Device.objects.filter(pk=retired.pk).update(status=DeviceStatus.RETIRED)
    response = Client().get("/metrics")
    assert response.status_code == 200
    values = [
        s.value
        for family in text_string_to_metric_families(response.content.decode())
        if family.name == "farm_devices_offline"
        for s in family.samples
    ]
    assert values == [1.0]  # alpha's sensor; beta's is retired; never-heard devices aren't


def test_the_admin_lists_and_filters_devices_by_online(tenants: tuple[Tenant, Tenant]) -> None:
    alpha, _ = tenants
    sensor, actuator = _silent_sensor(alpha)
    client = _support()
    page = client.get("/admin/devices/device/?online__exact=0")
    assert page.status_code == 200
    shown = {d.pk for d in page.context["cl"].result_list}
    assert sensor.pk in shown and actuator.pk not in shown
    page = client.get("/admin/devices/device/?online__exact=1")
    shown = {d.pk for d in page.context["cl"].result_list}
    assert actuator.pk in shown and sensor.pk not in shown
    assert b"seen" in page.content


def _support() -> Client:
    User.objects.create_superuser("support", "s@example.com", "pw")
    client = Client()
    client.login(username="support", password="pw")
    return client


def test_admin_edits_of_a_window_or_an_interval_move_the_offline_time(
    tenants: tuple[Tenant, Tenant],
) -> None:
    alpha, _ = tenants
    profile = DeviceProfileFactory(organization=alpha.kit.farm.organization)
    device = DeviceFactory(farm=alpha.kit.farm, profile=profile)  # a profile of no endpoints
    devices_heard_from(device_ids=[device.pk], now=T0)
    client = _support()
    empty = {"endpoints-TOTAL_FORMS": "0", "endpoints-INITIAL_FORMS": "0"}
    form = {
        "farm": device.farm_id,
        "profile": profile.pk,
        "serial_number": device.serial_number,
        "name": "",
        "offline_after_s": "40",
    }
    answer = client.post(f"/admin/devices/device/{device.pk}/change/", form | empty)
    assert answer.status_code == 302, answer.content
    device.refresh_from_db()
    assert device.offline_due_at == T0 + timedelta(seconds=40)
    zero = client.post(
        f"/admin/devices/device/{device.pk}/change/", form | empty | {"offline_after_s": "0"}
    )
    assert "offline_after_s" in zero.context["adminform"].form.errors
    client.post(
        f"/admin/devices/device/{device.pk}/change/", form | empty | {"offline_after_s": ""}
    )
    profile_form = {"name": profile.name, "expected_interval_s": "5"} | empty
    answer = client.post(f"/admin/devices/deviceprofile/{profile.pk}/change/", profile_form)
    assert answer.status_code == 302, answer.content
    device.refresh_from_db()
    assert device.offline_due_at == T0 + timedelta(seconds=15)
    cleared = client.post(
        f"/admin/devices/deviceprofile/{profile.pk}/change/",
        profile_form | {"expected_interval_s": ""},
    )
    assert "expected_interval_s" in cleared.context["adminform"].form.errors
