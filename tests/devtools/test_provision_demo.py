"""``manage.py provision_demo``: what ``make up`` needs so that its simulator's devices are
known, its rules fire and a person can log in; a second run changes nothing."""

from __future__ import annotations

import re
from io import StringIO

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command
from rest_framework.test import APIClient

from automation.models import AutomationRule
from devices.models import Device, DeviceInstanceEndpoint, Farm
from devtools.provisioning import VENT_OFF_BELOW, VENT_ON_ABOVE, simulator_serials
from devtools.simulator import TelemetryWave

pytestmark = pytest.mark.django_db


def _run(*args: str) -> str:
    out = StringIO()
    call_command("provision_demo", *args, stdout=out)
    return out.getvalue()


def test_provisions_the_simulators_serials_with_rules_and_a_login() -> None:
    text = _run("--farms", "2", "--devices", "5", "--web-url", "http://127.0.0.1:8000")
    serials = simulator_serials("SIM", 5)
    assert serials[0] == "SIM-0001"
    assert sorted(Device.objects.values_list("serial_number", flat=True)) == serials
    assert Farm.objects.count() == 2
    assert set(Device.objects.values_list("farm__name", flat=True)) == {"Farm 1", "Farm 2"}
    assert DeviceInstanceEndpoint.objects.count() == 10  # temp and io1 each
    assert AutomationRule.objects.filter(is_active=True).count() == 10
    assert "http://127.0.0.1:8000/admin/" in text

    login = re.search(r"login (\S+) / (\S+)\s+API token (\S+)", text)
    assert login, text
    user = get_user_model().objects.get(username=login.group(1))
    assert user.check_password(login.group(2)) and user.is_superuser
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {login.group(3)}")
    response = client.get("/api/v1/devices/")
    assert response.status_code == 200, response.content
    assert response.json()["count"] == 5


def test_a_second_run_adds_only_what_is_missing_and_shows_no_secret() -> None:
    _run("--devices", "3")
    text = _run("--devices", "4")
    assert "0 farms, 1 devices, 2 rules created" in text
    assert "login" not in text
    assert Device.objects.count() == 4 and AutomationRule.objects.count() == 8


def test_if_empty_leaves_a_database_with_farms_alone() -> None:
    _run("--devices", "2")
    text = _run("--if-empty", "--devices", "6")
    assert "left as it is" in text
    assert Device.objects.count() == 2


def test_the_simulators_wave_crosses_both_thresholds_every_period() -> None:
    wave = TelemetryWave("temp", 16.0, 34.0, 60.0)
    values = [wave.value(t, index=3) for t in range(0, 60, 2)]
    assert max(values) > VENT_ON_ABOVE and min(values) < VENT_OFF_BELOW
    assert wave.value(0, 0) != wave.value(0, 1)  # devices out of phase
    with pytest.raises(ValueError):
        TelemetryWave("temp", 5.0, 1.0, 60.0)
