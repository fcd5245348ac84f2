"""`make up` as a new user runs it: the real servers' variables set, a database nobody has
touched. Within a minute of the stack answering, telemetry rows grow and commands reach
applied (the provisioned devices match the simulator's), and the admin URL it printed shows
a styled page to the login it printed, as does the offline API documentation."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.request import urlopen

import psycopg
import pytest

from tests.browser import chromium
from tests.mqtt_fixtures import free_port
from tests.real_servers import REAL_SERVERS, private_servers_env, with_path

pytestmark = [pytest.mark.e2e]

ROOT = Path(__file__).resolve().parents[2]
START_TIMEOUT_S = 120.0  # migrations of an empty database included
FLOW_TIMEOUT_S = 60.0  # the acceptance figure: from the web answering to applied commands
LOGIN = re.compile(r"login (\S+) / (\S+)\s+API token (\S+)")
ADMIN_URL = re.compile(r"^admin\s+(http://\S+)", re.MULTILINE)
# Private Redis databases so the stack's queues and caches meet no other test's.
REDIS_DB, CELERY_REDIS_DB = 14, 15


@dataclass
class Stack:
    db_url: str
    output: Path
    admin_url: str
    username: str
    password: str

    def scalar(self, sql: str) -> int:
        with psycopg.connect(self.db_url, autocommit=True) as conn:
            row = conn.execute(sql).fetchone()
        return int(row[0]) if row else 0


def _stack_env(db_url: str, web_port: int, run: str) -> dict[str, str]:
    env = dict(os.environ)
    env |= private_servers_env(
        env, run=run, name="up", redis_db=REDIS_DB, celery_redis_db=CELERY_REDIS_DB
    )
    env |= {
        "DATABASE_URL": db_url,
        "WEB_PORT": str(web_port),
        "FLOWER_PORT": str(free_port()),
        "UP_DEVICES": "4",
    }
    env.pop("DJANGO_SETTINGS_MODULE", None)  # make up runs the default, as a user would
    return env


def _wait_for_start(proc: subprocess.Popen[bytes], output: Path, web_port: int) -> str:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"make up exited with {proc.returncode}:\n{output.read_text()[-4000:]}")
        text = output.read_text(errors="replace")
        if LOGIN.search(text) and ADMIN_URL.search(text):
            try:
                with urlopen(f"http://127.0.0.1:{web_port}/health", timeout=2):
                    return text
            except OSError:
                pass
        time.sleep(0.5)
    pytest.fail(f"make up did not answer within {START_TIMEOUT_S}s:\n{output.read_text()[-4000:]}")


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    missing = [name for name in REAL_SERVERS if not os.environ.get(name)]
    if missing or not os.environ["DATABASE_URL"].startswith("postgres"):
        pytest.skip(f"make up runs against real servers; unset: {' '.join(missing) or 'none'}")
    run = uuid.uuid4().hex[:8]
    # The server's maintenance database: the configured one need not exist yet.
    server = with_path(os.environ["DATABASE_URL"], "/postgres")
    db_name = f"farm_up_{run}"
    with psycopg.connect(server, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{db_name}"')
    db_url = with_path(server, f"/{db_name}")
    web_port = free_port()
    output = tmp_path_factory.mktemp("make-up") / "output.txt"
    with output.open("wb") as sink:
        proc = subprocess.Popen(
            ["make", "up"],
            cwd=ROOT,
            env=_stack_env(db_url, web_port, run),
            stdout=sink,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        text = _wait_for_start(proc, output, web_port)
        login = LOGIN.search(text)
        admin = ADMIN_URL.search(text)
        assert login and admin
        yield Stack(db_url, output, admin.group(1), login.group(1), login.group(2))
    finally:
        os.killpg(proc.pid, signal.SIGINT)  # Ctrl-C, as a user stops it
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        with psycopg.connect(server, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{db_name}" WITH (FORCE)')


def test_telemetry_grows_and_commands_reach_applied(stack: Stack) -> None:
    deadline = time.monotonic() + FLOW_TIMEOUT_S
    first = stack.scalar("SELECT count(*) FROM devices_telemetry")
    grown = applied = 0
    while time.monotonic() < deadline and not (grown and applied):
        time.sleep(1)
        grown = stack.scalar("SELECT count(*) FROM devices_telemetry") - first
        applied = stack.scalar(
            "SELECT count(*) FROM automation_automationcommandintent WHERE status = 'applied'"
        )
    tail = stack.output.read_text(errors="replace")[-3000:]
    assert grown > 0, f"no telemetry within {FLOW_TIMEOUT_S}s:\n{tail}"
    assert applied > 0, f"no command applied within {FLOW_TIMEOUT_S}s:\n{tail}"
    unknown = stack.scalar(
        "SELECT count(*) FROM devices_devicemessagerejection WHERE reason_code = 'unknown_device'"
    )
    assert unknown == 0, "the simulator's devices were not provisioned"


def test_printed_admin_url_shows_a_styled_page(stack: Stack, tmp_path: Path) -> None:
    from selenium.webdriver.common.by import By

    with chromium(tmp_path / "profile") as driver:
        driver.get(stack.admin_url)
        driver.find_element(By.NAME, "username").send_keys(stack.username)
        driver.find_element(By.NAME, "password").send_keys(stack.password)
        driver.find_element(By.CSS_SELECTOR, "input[type=submit]").click()
        driver.find_element(By.ID, "site-name")  # the index, signed in
        shot = tmp_path / "admin.png"
        driver.save_screenshot(str(shot))
        assert shot.stat().st_size > 10_000
        header = driver.execute_script(
            "return getComputedStyle(document.getElementById('header')).backgroundColor"
        )
        # The admin's base.css colours the header; unstyled it is transparent.
        assert header not in ("", "rgba(0, 0, 0, 0)", "transparent"), header

        # Swagger UI from the app's own static files renders the schema's title.
        driver.get(stack.admin_url.replace("/admin/", "/api/docs/"))
        title = driver.find_element(By.CSS_SELECTOR, ".swagger-ui .info .title")
        assert "Farm Automation Core API" in title.text
