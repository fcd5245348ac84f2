"""Configuration of the pipeline: its tasks are routed to ``notify`` and swept by beat, and
email settings come from the environment (console by default, SMTP from EMAIL_URL)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from config.beat import beat_schedule
from config.celery import TASK_ROUTES
from config.celery import app as celery_app
from notifications.channels import channel_names

ROOT = Path(__file__).resolve().parents[2]
PRINT_EMAIL = (
    "import django, json; django.setup(); from django.conf import settings as s; "
    "print(json.dumps([s.EMAIL_BACKEND, s.EMAIL_HOST, s.EMAIL_PORT, s.EMAIL_HOST_USER, "
    "s.EMAIL_HOST_PASSWORD, s.EMAIL_USE_TLS, s.EMAIL_USE_SSL]))"
)


def test_tasks_are_registered_routed_to_notify_and_swept_by_beat():
    celery_app.loader.import_default_modules()
    ours = {name for name in celery_app.tasks if name.startswith("notifications.")}
    assert ours == {"notifications.deliver", "notifications.sweep", "notifications.alarms_notify"}
    assert {TASK_ROUTES[name] for name in ours} == {"notify"}
    assert beat_schedule()["notifications-sweep"].task == "notifications.sweep"
    assert beat_schedule()["alarms-notify"].task == "notifications.alarms_notify"


def test_built_in_channels_are_registered():
    assert channel_names() == ["email", "inbox", "webhook"]


def run_settings(**env: str) -> subprocess.CompletedProcess[str]:
    clean = {
        k: v for k, v in os.environ.items() if not k.startswith("EMAIL_") and k != "DATABASE_URL"
    }
    clean.update(env, DJANGO_SETTINGS_MODULE="config.settings.test")
    return subprocess.run(
        [sys.executable, "-c", PRINT_EMAIL],
        cwd=ROOT,
        env=clean,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_email_defaults_to_the_console_and_email_url_switches_to_smtp():
    default = json.loads(run_settings().stdout)
    assert default[0] == "django.core.mail.backends.console.EmailBackend"
    smtp = json.loads(run_settings(EMAIL_URL="smtp://mailer:p%40ss@mail.example:587?tls=1").stdout)
    assert smtp == [
        "django.core.mail.backends.smtp.EmailBackend",
        "mail.example",
        587,
        "mailer",
        "p@ss",
        True,
        False,
    ]


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("EMAIL_URL", "http://mail.example"),
        ("EMAIL_PORT", "smtp"),
        ("NOTIFY_BACKOFF_S", "5,x"),
        ("NOTIFY_WEBHOOK_TIMEOUT_S", "soon"),
    ],
)
def test_malformed_setting_stops_start_up_naming_the_variable(variable, value):
    proc = run_settings(**{variable: value})
    assert proc.returncode != 0
    assert f"{variable}=" in proc.stderr and "is invalid" in proc.stderr
