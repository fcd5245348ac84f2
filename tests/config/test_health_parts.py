"""/health names each part with its status and why it is checked, and counts a process
beside the web server only where this deployment runs it: on the embedded default (MQTT_URL
unset) a web server alone answers 200 with the bridge "not running here" and Django logs no
error; where MQTT_URL names a broker, a missing or dead bridge still answers 503."""

from __future__ import annotations

import logging
from dataclasses import replace
from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone

from config.health import RULE
from tests.devices.factories import bridge_slots_live

pytestmark = pytest.mark.django_db


def _errors(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [f"{r.name}: {r.getMessage()}" for r in caplog.records if r.levelno >= logging.ERROR]


@pytest.fixture
def embedded(settings):  # type: ignore[no-untyped-def]
    """The web server of the embedded default: no bridge beside it."""
    settings.MQTT = replace(settings.MQTT, embedded=True)


@pytest.fixture
def runs_a_bridge(settings):  # type: ignore[no-untyped-def]
    """A deployment whose MQTT_URL names a broker, so it runs a bridge."""
    settings.MQTT = replace(settings.MQTT, embedded=False)


@pytest.mark.usefixtures("embedded")
def test_a_web_server_alone_on_the_embedded_default_is_healthy_and_logs_no_error(
    client: Client, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    response = client.get("/health")
    body = response.json()

    assert response.status_code == 200 and body["ok"] is True, body
    assert body["rule"] == RULE
    bridge = body["checks"]["bridge"]
    assert bridge["status"] == "not running here" and bridge["ok"] is None
    assert "MQTT_URL is unset" in bridge["detail"]
    for name in ("database", "cache", "broker", "bridge"):
        assert body["checks"][name]["why"], name
    assert body["checks"]["database"]["status"] == "ok"
    assert _errors(caplog) == []


@pytest.mark.usefixtures("embedded")
def test_a_bridge_run_by_hand_on_the_embedded_default_shows_its_slots(client: Client) -> None:
    bridge_slots_live()
    bridge = client.get("/health").json()["checks"]["bridge"]
    assert bridge["status"] == "ok" and bridge["ok"] is True
    assert bridge["slots"][0]["holderHost"] == "host-a"

    bridge_slots_live(beat_at=timezone.now() - timedelta(minutes=5))  # it died: not here
    response = client.get("/health")
    bridge = response.json()["checks"]["bridge"]
    assert response.status_code == 200 and bridge["status"] == "not running here"
    assert bridge["slots"][0]["ok"] is False  # what the check found stays visible


@pytest.mark.usefixtures("runs_a_bridge")
@pytest.mark.parametrize("bridge", ["never started", "stopped beating"])
def test_a_deployment_that_runs_a_bridge_answers_503_without_a_live_one(
    client: Client, caplog: pytest.LogCaptureFixture, bridge: str
) -> None:
    if bridge == "stopped beating":
        bridge_slots_live(beat_at=timezone.now() - timedelta(minutes=5))
    caplog.set_level(logging.DEBUG)
    response = client.get("/health")
    body = response.json()

    assert response.status_code == 503 and body["ok"] is False
    assert body["checks"]["bridge"]["status"] == "failing"
    assert body["checks"]["bridge"]["ok"] is False
    assert body["checks"]["database"]["status"] == "ok"
    # A real failure stays an error in Django's log (and shows caplog sees django.request).
    assert any(line.startswith("django.request") for line in _errors(caplog))


@pytest.mark.usefixtures("runs_a_bridge")
def test_a_deployment_with_a_live_bridge_is_healthy(client: Client) -> None:
    bridge_slots_live()
    body = client.get("/health").json()
    assert body["checks"]["bridge"]["status"] == "ok"
    assert body["ok"] is body["checks"]["broker"]["ok"]
