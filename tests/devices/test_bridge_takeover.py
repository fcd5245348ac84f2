"""Two bridge processes with one client id on a real Mosquitto (a private one on a free port),
as when `make demo` runs beside `make up`: they used to kick each other off tens of thousands
of times a minute, logging every time. Now each waits a doubling backoff after a takeover,
logs it at most once a minute, and after BRIDGE_TAKEOVER_MAX takeovers in a row one exits
with status 78 and a message naming BRIDGE_CLIENT_ID, while the other keeps its session."""

from __future__ import annotations

import os
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


@pytest.fixture
def bridge_env(private_mosquitto: PrivateMosquitto, tmp_path: Path) -> Iterator[dict[str, str]]:
    """The environment of a bridge on the private broker. The Celery broker is never reached:
    no device publishes, so nothing is handed off. The database is an empty file: the
    heartbeat fails (and says so) without stopping the bridge."""
    client_id = f"farm-bridge/test-{uuid.uuid4().hex[:8]}"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MQTT_", "BRIDGE_"))}
    env.pop("REDIS_URL", None)
    env |= {
        "DJANGO_SETTINGS_MODULE": "config.settings.test",
        "DJANGO_SECRET_KEY": f"test-only-{uuid.uuid4().hex}",
        "DATABASE_URL": f"sqlite:///{tmp_path / 'bridge.sqlite3'}",
        "CELERY_BROKER_URL": f"redis://127.0.0.1:{free_port()}/0",
        "MQTT_URL": f"mqtt://127.0.0.1:{private_mosquitto.port}",
        "MQTT_SHARED_GROUP": f"test-{uuid.uuid4().hex[:8]}",
        "BRIDGE_CLIENT_ID": client_id,
        "BRIDGE_TAKEOVER_MAX": str(TAKEOVER_MAX),
        "LOG_LEVEL": "WARNING",
        "PYTHONUNBUFFERED": "1",
    }
    yield env


@pytest.mark.parametrize("protocol", ["5", "4"], ids=["mqtt5", "mqtt311"])
def test_of_two_bridges_with_one_client_id_one_exits_naming_bridge_client_id(
    bridge_env: dict[str, str], private_mosquitto: PrivateMosquitto, tmp_path: Path, protocol: str
) -> None:
    env = bridge_env | {"MQTT_PROTOCOL": protocol}
    bridges = [BridgeProcess(env, tmp_path / f"bridge-{n}.log") for n in range(2)]
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
        forget_session(config, env["BRIDGE_CLIENT_ID"])

    assert loser.proc.returncode == EXIT_SESSION_TAKEN_OVER, loser.output()
    errors = [x for x in loser.output().splitlines() if x.startswith("CommandError:")]
    assert len(errors) == 1 and "BRIDGE_CLIENT_ID" in errors[0], loser.output()
    assert repr(env["BRIDGE_CLIENT_ID"]) in errors[0]
    for bridge in bridges:
        out = bridge.output()
        assert len(out.encode()) < MAX_LOG_BYTES, out
        assert out.count("took the session over") <= 1, out  # once a minute at most
