"""Two bridge processes with one client id on a real Mosquitto (a private one on a free port):
two deployments, each with its own database, on one broker under one BRIDGE_SLOT_PREFIX, so
both hold slot 0 through their own lease. They used to kick each other off tens of thousands
of times a minute, logging every time. Now each waits a doubling backoff after a takeover,
logs it at most once a minute, and after BRIDGE_TAKEOVER_MAX takeovers in a row one exits
with status 78 and a message naming BRIDGE_SLOT_PREFIX, while the other keeps its session."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from config.env import MqttConfig
from devices.management.commands.mqtt_bridge import EXIT_SESSION_TAKEN_OVER
from devices.mqtt.client import forget_session
from tests.mqtt_fixtures import LOOPBACK, PrivateMosquitto, free_port
from tests.waiting import wait_for

ROOT = Path(__file__).resolve().parents[2]
TAKEOVER_MAX = 3  # 1 s + 1 s + 2 s + 2 s of backoff between the first and the third
GIVES_UP_WITHIN_S = 60.0  # the processes' start-up included, on a loaded machine
WINNER_STAYS_S = 5.0  # longer than the backoff the loser would have waited next
MAX_LOG_BYTES = 16_000  # the two runs used to write 14.6 MB in 74 s


class BridgeProcess:
    """``manage.py mqtt_bridge`` as deployed, its output (JSON log lines) in a file."""

    def __init__(self, env: dict[str, str], log: Path) -> None:
        self.log = log
        with log.open("wb") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "manage.py", "mqtt_bridge", "--progress-interval", "0"],
                cwd=ROOT,
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
            )

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)


@pytest.fixture(scope="module")
def migrated_database(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An SQLite database with the tables, made once: each deployment gets a copy."""
    path = tmp_path_factory.mktemp("takeover") / "migrated.sqlite3"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MQTT_", "BRIDGE_"))}
    env |= {"DJANGO_SETTINGS_MODULE": "config.settings.test", "DATABASE_URL": f"sqlite:///{path}"}
    subprocess.run([sys.executable, "manage.py", "migrate", "-v0"], cwd=ROOT, env=env, check=True)
    return path


@pytest.fixture
def bridge_env(private_mosquitto: PrivateMosquitto, tmp_path: Path) -> Iterator[dict[str, str]]:
    """The environment of a bridge on the private broker. The Celery broker is never reached:
    no device publishes, so nothing is handed off."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MQTT_", "BRIDGE_"))}
    env.pop("REDIS_URL", None)
    env |= {
        "DJANGO_SETTINGS_MODULE": "config.settings.test",
        "DJANGO_SECRET_KEY": f"test-only-{uuid.uuid4().hex}",
        "CELERY_BROKER_URL": f"redis://127.0.0.1:{free_port()}/0",
        "MQTT_URL": f"mqtt://127.0.0.1:{private_mosquitto.port}",
        "MQTT_SHARED_GROUP": f"test-{uuid.uuid4().hex[:8]}",
        "BRIDGE_SLOT_PREFIX": f"farm-bridge-test-{uuid.uuid4().hex[:8]}",
        "BRIDGE_SLOTS": "1",
        "BRIDGE_TAKEOVER_MAX": str(TAKEOVER_MAX),
        "LOG_LEVEL": "WARNING",
        "PYTHONUNBUFFERED": "1",
    }
    yield env


@pytest.mark.parametrize("protocol", ["5", "4"], ids=["mqtt5", "mqtt311"])
def test_of_two_deployments_on_one_slot_id_one_exits_naming_bridge_slot_prefix(
    bridge_env: dict[str, str],
    migrated_database: Path,
    private_mosquitto: PrivateMosquitto,
    tmp_path: Path,
    protocol: str,
) -> None:
    client_id = f"{bridge_env['BRIDGE_SLOT_PREFIX']}/0"
    bridges = []
    for n in range(2):  # each deployment its own database: each holds slot 0
        database = tmp_path / f"deployment-{n}.sqlite3"
        shutil.copyfile(migrated_database, database)
        env = bridge_env | {"MQTT_PROTOCOL": protocol, "DATABASE_URL": f"sqlite:///{database}"}
        bridges.append(BridgeProcess(env, tmp_path / f"bridge-{n}.log"))
    try:
        loser = wait_for(
            lambda: next((b for b in bridges if b.proc.poll() is not None), None),
            "one of the two bridges to give up",
            GIVES_UP_WITHIN_S,
        )
        winner = next(b for b in bridges if b is not loser)
        with pytest.raises(subprocess.TimeoutExpired):  # it keeps the session, unchallenged
            winner.proc.wait(WINNER_STAYS_S)
    finally:
        for bridge in bridges:
            bridge.stop()
        config = MqttConfig(LOOPBACK, private_mosquitto.port, None, None, False, False, 5, None)
        forget_session(config, client_id)

    assert loser.proc.returncode == EXIT_SESSION_TAKEN_OVER, loser.output()
    errors = [x for x in loser.output().splitlines() if x.startswith("CommandError:")]
    assert len(errors) == 1 and "BRIDGE_SLOT_PREFIX" in errors[0], loser.output()
    assert repr(client_id) in errors[0]
    for bridge in bridges:
        out = bridge.output()
        assert len(out.encode()) < MAX_LOG_BYTES, out
        assert out.count("took the session over") <= 1, out  # once a minute at most
