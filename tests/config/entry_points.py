"""How the tests start each entry point as a deployment does (a subprocess with a clean
environment) and read what it printed."""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
PASSWORD = "TopSecretPw"
# Variables a test sets itself; the rest of the environment (the servers' URLs) is kept.
OWN = {
    "DJANGO_SETTINGS_MODULE",
    "DJANGO_SECRET_KEY",
    "WEBHOOK_SECRET_KEY",
    "DJANGO_DEBUG",
    "METRICS_TOKEN",
    "LOG_FORMAT",
}


def env_clean(**values: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in OWN}
    env.update(values)
    return env


# Production runs no embedded server: on the embedded default (no URL set) the tests name the
# ones the development settings would use, explicitly. Nothing here connects to them.
SERVERS_NAMED = {
    "DATABASE_URL": f"sqlite:///{ROOT / 'var' / 'farm.sqlite3'}",
    "CELERY_BROKER_URL": "memory://localhost/",
    "REDIS_URL": "redis://127.0.0.1:6379/0",
    "MQTT_URL": "mqtt://127.0.0.1:1883",
}


def env_production(**values: str) -> dict[str, str]:
    """What a deployment sets (farm.env.example), with ``values`` on top."""
    required = {
        "DJANGO_SETTINGS_MODULE": "config.settings.production",
        "DJANGO_SECRET_KEY": secrets.token_urlsafe(50),
        "WEBHOOK_SECRET_KEY": secrets.token_urlsafe(50),
        "DJANGO_ALLOWED_HOSTS": "farm.example.org",
    }
    servers = {k: v for k, v in SERVERS_NAMED.items() if not os.environ.get(k, "").strip()}
    return env_clean(**{**servers, **required, **values})


def run(argv: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=90, check=False
    )


def one_line_naming(proc: subprocess.CompletedProcess[str], variable: str) -> str:
    """The process failed with exactly one line on stderr, and it names ``variable``."""
    assert proc.returncode != 0, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith(variable), lines[0]
    return lines[0]


MANAGE_CHECK = [sys.executable, "manage.py", "check"]
WSGI_IMPORT = [sys.executable, "-c", "import config.wsgi"]
CELERY_WORKER = [str(BIN / "celery"), "-A", "config", "worker", "--pool", "solo"]
