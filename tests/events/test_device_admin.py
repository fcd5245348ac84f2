"""Support changes a device's status only through the status service: an admin action that
publishes ``DeviceStatusChanged``; the change form shows the status read-only."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.test import Client

from devices.models import Device
from tests.devices.factories import make_farm

pytestmark = pytest.mark.django_db
URL = "/admin/devices/device/"


def test_an_admin_action_moves_the_status_and_publishes_the_event(
    client: Client, sent, django_capture_on_commit_callbacks
) -> None:
    kit = make_farm(prefix="adm")
    User.objects.create_superuser("support", "s@example.com", "pw")
    client.login(username="support", password="pw")
    with django_capture_on_commit_callbacks(execute=True):
        response = client.post(
            URL,
            {"action": "device_status_maintenance", "_selected_action": [kit.actuator.pk]},
        )
    assert response.status_code == 302
    assert Device.objects.get(pk=kit.actuator.pk).status == "maintenance"
    [message] = sent
    assert message["type"] == "DeviceStatusChanged"
    assert message["payload"]["actor"] == "support"
    form = client.get(f"{URL}{kit.actuator.pk}/change/").content.decode()
    assert 'name="status"' not in form  # read-only on the change form
