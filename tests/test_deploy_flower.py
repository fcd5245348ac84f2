"""Flower as deploy/ starts it (the Procfile line, the systemd unit): it asks for HTTP basic
auth with the credentials of FLOWER_BASIC_AUTH, and it does not start without them, since
without them anyone who reaches the port could inspect and control the workers."""

from __future__ import annotations

import base64
import os
import shlex
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.mqtt_fixtures import free_port, port_open

ROOT = Path(__file__).resolve().parent.parent
DEPLOY = ROOT / "deploy"
START_TIMEOUT_S = 30.0
CREDENTIALS = "operator:not-a-real-password"


def procfile_command(name: str) -> str:
    line = next(x for x in (DEPLOY / "Procfile").read_text().splitlines() if x.startswith(name))
    return line.split(":", 1)[1].strip()


def unit_command(key: str) -> list[str]:
    """A command line of the systemd unit, as systemd passes it: ``$$`` is a literal ``$``."""
    unit = (DEPLOY / "systemd" / "farm-flower.service").read_text()
    line = next(x for x in unit.splitlines() if x.startswith(f"{key}="))
    return shlex.split(line.split("=", 1)[1].replace("$$", "$"))


def environment(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLOWER_")}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env |= {
        "DJANGO_SETTINGS_MODULE": "config.settings.test",
        "CELERY_BROKER_URL": "memory://localhost/",
    }
    return env | extra


def test_the_procfile_and_the_unit_refuse_to_start_flower_without_credentials() -> None:
    procfile = subprocess.run(
        ["sh", "-c", procfile_command("flower")],
        cwd=ROOT,
        env=environment(),
        capture_output=True,
        text=True,
        timeout=START_TIMEOUT_S,
    )
    guard = unit_command("ExecStartPre")
    unit_refuses = subprocess.run(guard, env=environment(), capture_output=True, text=True)
    unit_starts = subprocess.run(guard, env=environment(FLOWER_BASIC_AUTH=CREDENTIALS))

    assert procfile.returncode != 0 and "FLOWER_BASIC_AUTH" in procfile.stderr
    assert unit_refuses.returncode != 0 and "FLOWER_BASIC_AUTH" in unit_refuses.stderr
    assert unit_starts.returncode == 0
    # The password comes from the environment, never from the command line `ps` shows.
    assert "basic" not in " ".join(unit_command("ExecStart")).lower()


@pytest.fixture
def flower() -> Iterator[int]:
    """Flower started by the Procfile's line, on a free port."""
    port = free_port()
    command = procfile_command("flower").replace("--port=5555", f"--port={port}")
    assert f"--port={port}" in command
    proc = subprocess.Popen(
        ["sh", "-c", command],
        cwd=ROOT,
        env=environment(FLOWER_BASIC_AUTH=CREDENTIALS),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while not port_open(port):
            assert proc.poll() is None, "flower exited"
            assert time.monotonic() < deadline, "flower did not open its port"
            time.sleep(0.1)
        yield port
    finally:
        proc.terminate()
        proc.wait(10)


def status(port: int, credentials: str | None) -> int:
    request = urllib.request.Request(f"http://127.0.0.1:{port}/workers")
    if credentials is not None:
        token = base64.b64encode(credentials.encode()).decode()
        request.add_header("Authorization", f"Basic {token}")
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            code: int = response.status
            return code
    except urllib.error.HTTPError as exc:
        return exc.code


def test_flower_asks_for_the_credentials_of_flower_basic_auth(flower: int) -> None:
    assert status(flower, None) == 401
    assert status(flower, "operator:wrong") == 401
    assert status(flower, CREDENTIALS) == 200
