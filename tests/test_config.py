"""Configuration: malformed settings fail at start naming the variable; the beat schedule and
routes name real tasks."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.core.management import call_command
from django_celery_beat.models import PeriodicTask

from config.beat import beat_schedule
from config.celery import STAGE_QUEUES, TASK_ROUTES
from config.celery import app as celery_app

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("DATABASE_URL", "mysql://root@localhost/farm"),
        ("DATABASE_URL", "postgres://host:notaport/db"),
        ("DATABASE_URL", "postgres://host:5432/"),
        ("DATABASE_TRANSACTION_POOLING", "transaction"),
        ("CELERY_BROKER_URL", "kafka://broker:9092"),
        ("REDIS_URL", "http://localhost:6379"),
        ("MQTT_URL", "mqtt://"),
        ("MQTT_URL", "ws://broker:80"),
        ("ACK_TIMEOUT_S", "soon"),
        ("TELEMETRY_MAX_FUTURE_S", "5 minutes"),
        ("TELEMETRY_MAX_AGE_S", "-1"),
        ("RETRY_BACKOFF_S", "5,x,45"),
        ("MQTT_PROTOCOL", "3"),
        ("DEVICE_HEALTH_SWEEP_INTERVAL_S", "0"),
        ("DEVICE_HEALTH_SWEEP_BATCH", "none"),
        ("EXPORT_MAX_DAYS", "0"),
    ],
)
def test_malformed_setting_stops_start_up_naming_the_variable(variable, value) -> None:
    env = {k: v for k, v in os.environ.items() if k not in {"DATABASE_URL", "MQTT_URL"}}
    env[variable] = value
    if variable == "MQTT_PROTOCOL":
        env["MQTT_URL"] = "mqtt://127.0.0.1:1883"
    proc = subprocess.run(
        [sys.executable, "manage.py", "check"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode != 0
    assert f"{variable}=" in proc.stderr
    assert "is invalid" in proc.stderr


def test_every_beat_entry_and_route_names_a_registered_task() -> None:
    celery_app.loader.import_default_modules()
    registered = set(celery_app.tasks)
    for entry in beat_schedule().values():
        assert entry.task in registered
    apps = {"common", "devices", "automation", "scheduler", "events", "reminders", "notifications"}
    apps.add("rollouts")
    project_tasks = {n for n in registered if n.split(".")[0] in apps}
    assert project_tasks == set(TASK_ROUTES)
    assert set(TASK_ROUTES.values()) <= set(STAGE_QUEUES)
    for name in project_tasks:  # a stuck task is stopped, never holds a worker for good
        task = celery_app.tasks[name]
        assert 0 < task.soft_time_limit < task.time_limit, name


@pytest.mark.django_db
def test_sync_beat_schedule_writes_entries_and_is_idempotent() -> None:
    call_command("sync_beat_schedule", stdout=open(os.devnull, "w"))  # noqa: SIM115
    call_command("sync_beat_schedule", stdout=open(os.devnull, "w"))  # noqa: SIM115
    names = set(PeriodicTask.objects.values_list("name", flat=True))
    assert names == set(beat_schedule())
