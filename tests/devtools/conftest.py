"""`make demo` run once per test session, as a user runs it (migrate, then the demo command
in its own process), on the embedded default or, when the real servers' variables are set, on
them with a database of its own. The tests of what it printed and of the way from it into the
admin and the API docs share that one run: it takes most of a minute."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psycopg
import pytest

from tests.mqtt_fixtures import free_port
from tests.real_servers import REAL_SERVERS, private_servers_env, with_path

ROOT = Path(__file__).resolve().parents[2]
# Private Redis databases: the demo's queues and caches meet no other test's.
REDIS_DB, CELERY_REDIS_DB = 12, 13


@dataclass(frozen=True)
class DemoRun:
    """The environment the demo ran in (its database stays for the session) and its output."""

    env: dict[str, str]
    returncode: int
    stdout: str
    stderr: str


def manage(
    env: dict[str, str], *args: str, timeout_s: float = 300
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout_s,
    )


@pytest.fixture(scope="session")
def demo_env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    env = {k: v for k, v in os.environ.items() if k not in REAL_SERVERS}
    env.pop("DJANGO_SETTINGS_MODULE", None)  # the demo runs the default settings
    real = os.environ.get("DATABASE_URL", "")
    if not real.startswith("postgres"):
        env["DATABASE_URL"] = f"sqlite:///{tmp_path_factory.mktemp('demo') / 'demo.sqlite3'}"
        # An embedded broker of its own: on the default port another run's demo devices,
        # of the same serials, would answer this run's commands.
        env["MQTT_EMBEDDED_PORT"] = str(free_port())
        yield env
        return
    name = f"demo_{uuid.uuid4().hex[:10]}"
    admin_url = with_path(real, "/postgres")
    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    env |= private_servers_env(
        dict(os.environ),
        run=uuid.uuid4().hex[:8],
        name="demo",
        redis_db=REDIS_DB,
        celery_redis_db=CELERY_REDIS_DB,
    )
    env |= {"DATABASE_URL": with_path(real, f"/{name}"), "MQTT_URL": os.environ["MQTT_URL"]}
    try:
        yield env
    finally:
        with psycopg.connect(admin_url, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture(scope="session")
def demo_run(demo_env: dict[str, str]) -> DemoRun:
    migrated = manage(demo_env, "migrate", "--noinput")
    assert migrated.returncode == 0, migrated.stderr[-2000:]
    demo = manage(demo_env, "demo")
    return DemoRun(demo_env, demo.returncode, demo.stdout, demo.stderr)


@pytest.fixture
def demo_ran(demo_run: DemoRun) -> DemoRun:
    """The demo's run, which a test that looks at its data needs to have succeeded."""
    assert demo_run.returncode == 0, (demo_run.stdout + demo_run.stderr)[-3000:]
    return demo_run
