"""An integrator's first hour, over the API only, against the broker as deployed
(deploy/mosquitto.conf with its dynamic security plugin): create a farm, a device profile, a
device (its MQTT login comes back once) and a rule; the device logs in with that login, its
reading crosses the threshold, its relay ends applied. Retiring the device over the API
closes the broker to it."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import override_settings
from rest_framework.test import APIClient

from common.models import MemberRole, Organization, OrganizationMember
from config.celery import app as celery_app
from config.env import MqttConfig
from devices.mqtt.bridge import MqttBridge
from devices.mqtt.publisher import close_publisher
from devtools.runtime import in_process_beat, in_process_worker
from devtools.simulator import DeviceSimulator, SimulatedDevice
from tests.common.auth import token_client
from tests.devices.deployed_broker import DeployedMosquitto, Login, dynsec_broker, refused
from tests.waiting import wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]
__all__ = ["dynsec_broker"]  # the fixture, imported for this module


@pytest.fixture
def backend(dynsec_broker: DeployedMosquitto, fast_timers: None) -> Iterator[MqttConfig]:
    """The whole backend on the deployed broker: workers and beat in process, the bridge
    and the dispatch publisher on the backend's listener, device logins through the plugin."""
    config = dynsec_broker.config(dynsec_broker.backend)
    close_publisher()
    celery_app.control.purge()  # stale messages of earlier runs name rows that are gone
    with (
        override_settings(
            MQTT=config,
            DEVICE_CREDENTIALS_BACKEND="devices.mqtt.dynsec.DynsecCredentials",
            MQTT_DYNSEC=dynsec_broker.config(dynsec_broker.admin),
        ),
        in_process_worker(concurrency=4),
        in_process_beat(tick_s=0.05),
    ):
        bridge = MqttBridge(
            config=config, client_id=f"e2e-bridge/{uuid.uuid4().hex[:8]}", session_expiry_s=60
        )
        bridge.start()
        assert bridge.wait_connected(10), "bridge did not connect"
        try:
            yield config
        finally:
            bridge.stop()
            close_publisher()


def _integrator() -> APIClient:
    """An organisation admin with an API token: what the operator hands an integrator."""
    org = Organization.objects.create(name=f"Integrator {uuid.uuid4().hex[:6]}")
    user = User.objects.create_user(username=f"integrator-{uuid.uuid4().hex[:6]}")
    OrganizationMember.objects.create(user=user, organization=org, role=MemberRole.ADMIN)
    client = token_client(user)
    client.organization_id = org.pk  # type: ignore[attr-defined]
    return client


def _post(client: APIClient, path: str, body: dict[str, Any]) -> dict[str, Any]:
    response = client.post(path, body, format="json")
    assert response.status_code == 201, (path, response.status_code, response.json())
    data: dict[str, Any] = response.json()
    return data


def _provision(client: APIClient, serial: str) -> tuple[dict[str, Any], dict[str, int]]:
    """Farm, profile, device and rule over the API; the device and its endpoint ids."""
    org = client.organization_id  # type: ignore[attr-defined]
    farm = _post(
        client,
        "/api/v1/farms/",
        {"organization": org, "name": "North", "time_zone": "Asia/Ho_Chi_Minh"},
    )
    temp = {"key": "temp", "data_type": "number"}
    io1 = {"key": "io1", "data_type": "bool", "writable": True, "rpc_method": "setIO"}
    profile = _post(
        client,
        "/api/v1/profiles/",
        {
            "organization": org,
            "name": f"Greenhouse box {uuid.uuid4().hex[:6]}",
            "endpoints": [temp, io1],
        },
    )
    device = _post(
        client,
        "/api/v1/devices/",
        {"farm": farm["id"], "profile": profile["id"], "serial_number": serial, "name": "GH-1"},
    )
    listed = client.get("/api/v1/endpoints/", {"device": device["id"]}).json()["results"]
    endpoints = {row["key"]: row["id"] for row in listed}
    assert set(endpoints) == {"temp", "io1"}, listed
    _post(
        client,
        "/api/v1/rules/",
        {
            "farm": farm["id"],
            "name": "Vent when hot",
            "trigger_endpoint": endpoints["temp"],
            "operator": "gt",
            "threshold_value": 30,
            "target_endpoint": endpoints["io1"],
            "target_value": True,
        },
    )
    return device, endpoints


def test_provisioned_over_the_api_the_device_connects_and_its_relay_ends_applied(
    backend: MqttConfig, dynsec_broker: DeployedMosquitto
) -> None:
    client = _integrator()
    serial = f"GH-{uuid.uuid4().hex[:8].upper()}"
    device, _endpoints = _provision(client, serial)
    login = device["mqtt_credentials"]
    assert login["username"] == serial and login["password"]
    assert "mqtt_credentials" not in client.get(f"/api/v1/devices/{device['id']}/").json()

    device_config = dynsec_broker.config(Login(login["username"], login["password"]))
    sim = DeviceSimulator(
        [SimulatedDevice(serial, {"temp": 20.0, "io1": False})],
        config=device_config,
        client_id=serial,
    )
    sim.start()  # logs in with the issued password and subscribes to its request topic
    try:
        assert sim.publish_telemetry(serial, {"temp": 34.5})

        def applied() -> list[dict[str, Any]] | None:
            rows = client.get("/api/v1/commands/", {"device": device["id"]}).json()["results"]
            return rows if rows and all(r["status"] == "applied" for r in rows) else None

        rows = wait_for(applied, "the relay's command applied", 30)
        assert len(rows) == 1
        assert sim.values_of(serial)["io1"] is True
        assert sum(sim.applies.values()) == 1
    finally:
        sim.stop()

    response = client.post(
        f"/api/v1/devices/{device['id']}/status/", {"status": "retired"}, format="json"
    )
    assert response.status_code == 200, response.json()
    assert refused(device_config), "a retired device still logs in"
