"""The broker a deployment runs (deploy/mosquitto.conf, deploy/RUNBOOK.md "Broker
credentials"), on a private Mosquitto: only listener ports, file paths and the persistence
directory are adapted. The dynamic security plugin's file is made as the runbook says
(``mosquitto_ctrl dynsec init``, then deploy/mosquitto-dynsec-bootstrap.json sent as the
admin), and device logins are set through the product's own backend.

Other tests start it with the ``dynsec_broker`` fixture (import it into the test module)."""

from __future__ import annotations

import json
import os
import secrets
import shutil
import subprocess
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import paho.mqtt.client as paho
import pytest

from config.env import MqttConfig
from devices.mqtt.client import MqttUnavailable, connect, new_client
from devices.mqtt.dynsec import CONTROL_TOPIC, DynsecCredentials
from tests.mqtt_fixtures import LOOPBACK, free_port, port_open
from tests.waiting import WAIT_S

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
BOOTSTRAP = DEPLOY / "mosquitto-dynsec-bootstrap.json"
BACKEND_USER = "farm-backend"  # the user deploy/mosquitto-acl-backend names
DYNSEC_ADMIN = "farm-dynsec/admin"  # the runbook's admin
DEVICE_LISTENER, BACKEND_LISTENER = 1883, 1885
START_TIMEOUT_S = 10.0
CONTROL_TOPIC_FILTER = "$CONTROL/dynamic-security/#"
DYNSEC_TIMEOUT_S = 5.0


@dataclass(frozen=True)
class Login:
    username: str
    password: str


def deployed_plugin() -> Path | None:
    """The plugin deploy/mosquitto.conf loads, when this machine has it."""
    for line in (DEPLOY / "mosquitto.conf").read_text().splitlines():
        key, _, value = line.partition(" ")
        if key == "plugin":
            return Path(value) if Path(value).exists() else None
    return None


def missing_tools() -> str | None:
    """Why the deployed broker cannot run here, or None."""
    for tool in ("mosquitto", "mosquitto_passwd", "mosquitto_ctrl", "mosquitto_pub"):
        if shutil.which(tool) is None:
            return f"needs the {tool} binary"
    if deployed_plugin() is None:
        return "needs Mosquitto's dynamic security plugin where deploy/mosquitto.conf loads it"
    return None


class DeployedMosquitto:
    """deploy/mosquitto.conf on free loopback ports, its files in ``workdir``. A password file
    named for the backend gets the backend user, any other the backend too (when the
    configuration has no file of its own for it); the plugin's file gets ``admin``."""

    def __init__(self, workdir: Path, backend: Login, admin: Login) -> None:
        self.backend, self.admin = backend, admin
        self.ports: dict[int, int] = {}
        self.dynsec_file: Path | None = None
        lines, password_files = [], []
        for line in (DEPLOY / "mosquitto.conf").read_text().splitlines():
            key, _, value = line.partition(" ")
            if key == "listener":
                self.ports[int(value.split()[0])] = port = free_port()
                line = f"listener {port} {LOOPBACK}"
            elif key == "acl_file":
                name = Path(value).name
                shutil.copy(DEPLOY / f"mosquitto-{name}", workdir / name)
                line = f"acl_file {workdir / name}"
            elif key == "password_file":
                password_files.append(workdir / Path(value).name)
                line = f"password_file {password_files[-1]}"
            elif key == "plugin_opt_config_file":
                self.dynsec_file = workdir / Path(value).name
                line = f"plugin_opt_config_file {self.dynsec_file}"
            elif key == "persistence_location":
                (workdir / "data").mkdir()
                line = f"persistence_location {workdir / 'data'}/"
            lines.append(line)
        if os.geteuid() == 0:  # as root Mosquitto drops to a user who cannot read workdir
            lines.append("user root")
        own_file = any("backend" in f.name for f in password_files)
        for path in password_files:
            if "backend" in path.name or not own_file:
                _run(
                    ["mosquitto_passwd", "-c", "-b", str(path), backend.username, backend.password]
                )
        if self.dynsec_file is not None:
            init = ["mosquitto_ctrl", "dynsec", "init", str(self.dynsec_file)]
            _run([*init, admin.username, admin.password])
        self._conf = workdir / "mosquitto.conf"
        self._conf.write_text("\n".join(lines) + "\n")
        self._log = workdir / "mosquitto.log"
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def device_port(self) -> int:
        return self.ports[DEVICE_LISTENER]

    @property
    def backend_port(self) -> int:
        return self.ports.get(BACKEND_LISTENER, self.device_port)

    def config(self, login: Login | None, *, port: int | None = None) -> MqttConfig:
        """How ``login`` connects: the backend to its listener, anyone else to the devices'."""
        if port is None:
            port = self.backend_port if login == self.backend else self.device_port
        return MqttConfig(
            host=LOOPBACK,
            port=port,
            username=login.username if login else None,
            password=login.password if login else None,
            tls=False,
            embedded=False,
            protocol=5,
            shared_group=f"test-{uuid.uuid4().hex[:8]}",
        )

    def credentials(self, *, timeout_s: float = DYNSEC_TIMEOUT_S) -> DynsecCredentials:
        """The product's backend, as the admin (what MQTT_DYNSEC_URL names)."""
        return DynsecCredentials(self.config(self.admin), timeout_s)

    def start(self) -> None:
        """Start it, then bootstrap the plugin as the runbook does (again: a no-op)."""
        with self._log.open("ab") as out:
            self._proc = subprocess.Popen(
                ["mosquitto", "-c", str(self._conf)], stdout=out, stderr=subprocess.STDOUT
            )
        try:
            deadline = time.monotonic() + START_TIMEOUT_S
            while not all(port_open(p) for p in self.ports.values()):
                if time.monotonic() > deadline or self._proc.poll() is not None:
                    raise RuntimeError(f"mosquitto did not start: {self._log.read_text()}")
                time.sleep(0.02)
            if self.dynsec_file is not None:
                self._bootstrap()
        except BaseException:
            self.stop()  # no broker outlives a failed start
            raise

    def _bootstrap(self) -> None:
        """deploy/mosquitto-dynsec-bootstrap.json, published as the runbook says; done once
        the plugin has written its effect to its file."""
        assert self.dynsec_file is not None
        login = ["-u", self.admin.username, "-P", self.admin.password]
        at = ["-h", LOOPBACK, "-p", str(self.device_port)]
        _run(["mosquitto_pub", *at, *login, "-t", CONTROL_TOPIC, "-f", str(BOOTSTRAP)])
        deadline = time.monotonic() + START_TIMEOUT_S
        while not _bootstrapped(self.dynsec_file):
            if time.monotonic() > deadline:
                raise RuntimeError(f"the bootstrap did not apply: {self._log.read_text()}")
            time.sleep(0.02)

    def stop(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            self._proc.terminate()
            self._proc.wait(10)
        self._proc = None


def _bootstrapped(path: Path) -> bool:
    """Everything denied by default, and the admin's role left with the control topic only."""
    try:
        saved = json.loads(path.read_text())
    except ValueError:  # the plugin is rewriting it
        return False
    admin = next(r for r in saved["roles"] if r["rolename"] == "admin")
    topics = {acl["topic"] for acl in admin["acls"]}
    return not any(saved["defaultACLAccess"].values()) and topics == {CONTROL_TOPIC_FILTER}


def _run(argv: list[str]) -> None:
    subprocess.run(argv, check=True, capture_output=True, timeout=START_TIMEOUT_S)


def new_login(prefix: str = "DS") -> Login:
    return Login(f"{prefix}-{uuid.uuid4().hex[:8]}", secrets.token_urlsafe(16))


@pytest.fixture
def dynsec_broker(tmp_path: Path) -> Iterator[DeployedMosquitto]:
    """The deployed broker, started, with its plugin bootstrapped and no device login yet;
    ``.credentials()`` sets and removes logins, ``.config(login)`` connects as anyone."""
    reason = missing_tools()
    if reason:
        pytest.skip(reason)
    server = DeployedMosquitto(
        tmp_path,
        Login(BACKEND_USER, secrets.token_urlsafe(12)),
        Login(DYNSEC_ADMIN, secrets.token_urlsafe(12)),
    )
    server.start()
    try:
        yield server
    finally:
        server.stop()


def publish(client: paho.Client, topic: str, payload: bytes) -> None:
    info = client.publish(topic, payload, qos=1)
    info.wait_for_publish(WAIT_S)
    assert info.is_published(), f"no PUBACK for {topic}"


def refused(config: MqttConfig) -> bool:
    """The broker refused this login (not merely unreachable)."""
    client = new_client("probe", config=config)
    try:
        connect(client, config=config, attempts=1)
    except MqttUnavailable as exc:
        return "refused" in str(exc)
    client.disconnect()
    return False
