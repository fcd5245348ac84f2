"""/health and /metrics while their servers are down: a process whose database, Redis and
Celery broker are closed ports answers /health with the documented 503 JSON (each check's
failure its own verdict, credentials masked) and /metrics with the series it can still read
plus which source failed. /health never shows the bridge's MQTT client id."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from django.test import Client
from prometheus_client.parser import text_string_to_metric_families

from config.health import _CHECKS, health_check_register
from tests.devices.factories import bridge_slots_live

ROOT = Path(__file__).resolve().parents[2]
PASSWORD = "TopSecretPw"

# Runs in a process configured against the closed ports; prints both answers as JSON.
PROBE = """
import json, django
django.setup()
from django.test import Client
client = Client(raise_request_exception=False, HTTP_HOST="localhost")
health = client.get("/health")
metrics = client.get("/metrics")
print(json.dumps({
    "health": [health.status_code, health["Content-Type"], health.content.decode()],
    "metrics": [metrics.status_code, metrics.content.decode()],
}))
"""


def _closed_port() -> int:
    """A port nothing listens on: bound, then released."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture(scope="module")
def servers_down() -> dict[str, Any]:
    env = {k: v for k, v in os.environ.items() if k != "PROMETHEUS_MULTIPROC_DIR"}
    env.update(
        DJANGO_SETTINGS_MODULE="config.settings.test",
        DATABASE_URL=f"postgres://farm:{PASSWORD}@127.0.0.1:{_closed_port()}/farm",
        REDIS_URL=f"redis://:{PASSWORD}@127.0.0.1:{_closed_port()}/0",
        CELERY_BROKER_URL=f"redis://:{PASSWORD}@127.0.0.1:{_closed_port()}/1",
        MQTT_URL=f"mqtt://127.0.0.1:{_closed_port()}",  # a deployment that runs a bridge
    )
    proc = subprocess.run(
        [sys.executable, "-c", PROBE],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    return dict(json.loads(proc.stdout.strip().splitlines()[-1]))


def test_health_with_its_servers_down_is_503_json_with_each_failure(servers_down) -> None:
    status, content_type, text = servers_down["health"]
    assert (status, content_type) == (503, "application/json")
    body = json.loads(text)
    assert body["ok"] is False
    checks = body["checks"]
    for name in ("database", "cache", "broker", "bridge"):
        assert checks[name]["ok"] is False, name
        assert checks[name]["error"], name
    assert "OperationalError" in checks["database"]["error"]
    assert PASSWORD not in text


def test_metrics_with_the_database_down_answers_and_names_the_failed_sources(
    servers_down,
) -> None:
    status, text = servers_down["metrics"]
    assert status == 200
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }
    for source in ("automation", "scheduler", "events"):
        assert samples[("farm_metrics_source_up", (("source", source),))] == 0
    assert "python_info" in text  # the process's own series are still there
    assert PASSWORD not in text


@pytest.mark.django_db
def test_a_check_that_raises_is_reported_as_its_own_failure(client: Client) -> None:
    def broken(now: Any) -> dict[str, Any]:
        raise ConnectionRefusedError(f"redis://:{PASSWORD}@10.0.0.9:6379 refused")

    health_check_register("probe", broken)
    try:
        response = client.get("/health")
    finally:
        _CHECKS.pop("probe")
    assert response.status_code == 503
    probe = response.json()["checks"]["probe"]
    assert probe == {
        "ok": False,
        "status": "failing",
        "error": "ConnectionRefusedError: redis://:***@10.0.0.9:6379 refused",
    }
    assert response.json()["checks"]["database"]["ok"] is True


@pytest.mark.django_db
def test_health_does_not_show_the_bridges_client_id(client: Client, settings) -> None:  # type: ignore[no-untyped-def]
    settings.BRIDGE_SLOT_PREFIX = "farm-bridge-host-a"
    bridge_slots_live()
    response = client.get("/health")
    assert response.json()["checks"]["bridge"]["ok"] is True
    assert b"farm-bridge-host-a" not in response.content


@pytest.mark.django_db
def test_metrics_marks_every_source_up_when_it_was_read(client: Client) -> None:
    text = client.get("/metrics").content.decode()
    assert 'farm_metrics_source_up{source="automation"} 1.0' in text
