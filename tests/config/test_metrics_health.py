"""/metrics adds up counters and histograms written by separate processes (prometheus_client
multiprocess mode) and derives backlogs from the database at scrape time; /health checks the
database, the broker and the bridge's heartbeat."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from dataclasses import replace
from datetime import timedelta
from pathlib import Path

import pytest
from django.test import Client
from django.utils import timezone
from prometheus_client.parser import text_string_to_metric_families

from tests.automation.conftest import make_intent
from tests.devices.factories import bridge_slots_live, make_farm

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("clock_at_fixture_dates")]
ROOT = Path(__file__).resolve().parents[2]


def _samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def test_counters_and_histograms_add_up_across_two_worker_processes(
    client: Client, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    env = {**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(tmp_path)}
    workers = [
        subprocess.Popen(
            [sys.executable, "-m", "tests.config.metrics_worker", str(n)], cwd=ROOT, env=env
        )
        for n in (3, 4)
    ]
    assert [w.wait(timeout=120) for w in workers] == [0, 0]
    files = list(tmp_path.glob("*.db"))
    assert len(files) >= 2  # one file set per process
    # Named by host and pid: containers sharing the directory each number pids from 1.
    assert all(
        f.stem.endswith(tuple(f"{socket.gethostname()}-{w.pid}" for w in workers)) for f in files
    )
    kit = make_farm(prefix="m")
    kit.rule()
    make_intent(kit)  # one pending command: a backlog only the database knows
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(tmp_path))
    samples = _samples(client.get("/metrics").content.decode())
    assert samples[("farm_task_items_total", (("stage", "ingest"),))] == 35.0
    ack = "farm_command_ack_latency_seconds"
    assert samples[(f"{ack}_count", ())] == 7.0
    assert samples[(f"{ack}_bucket", (("le", "0.25"),))] == 0.0
    assert samples[(f"{ack}_bucket", (("le", "0.5"),))] == 7.0
    moved = (("reason", "acknowledged"), ("to_status", "acknowledged"))
    assert samples[("farm_command_transitions_total", moved)] == 7.0
    assert samples[("farm_backlog", (("stage", "command"), ("state", "pending_dispatch")))] == 1
    assert samples[("farm_scheduler_rows", (("state", "held"),))] == 0


def test_single_process_metrics_include_database_backlogs(
    client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("PROMETHEUS_MULTIPROC_DIR", raising=False)
    response = client.get("/metrics")
    assert response.status_code == 200
    text = response.content.decode()
    assert "farm_backlog" in text and "farm_scheduler_rows" in text


def test_health_needs_a_fresh_connected_bridge(client: Client, settings) -> None:
    settings.MQTT = replace(settings.MQTT, embedded=False)  # a deployment that runs a bridge
    response = client.get("/health")
    body = response.json()
    assert body["checks"]["database"]["ok"] is True
    assert body["checks"]["bridge"]["ok"] is False and response.status_code == 503
    bridge_slots_live()
    body = client.get("/health").json()
    assert body["checks"]["bridge"]["ok"] is True
    assert body["ok"] is body["checks"]["broker"]["ok"]
    bridge_slots_live(beat_at=timezone.now() - timedelta(minutes=5))
    assert client.get("/health").json()["checks"]["bridge"]["ok"] is False
