"""The system as an operator runs it, for chaos tests: private Redis and Mosquitto servers
that a test may flush or restart without touching anything else on the machine, and the
project's processes (bridge, one Celery worker per stage, beat, device simulator) started
from the command line against the test database, each in its own process group so that a
SIGKILL takes the whole worker (parent and pool children) down like a lost machine."""

from __future__ import annotations

import contextlib
import http.server
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.mqtt_fixtures import free_port
from tests.waiting import wait_for

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
STOP_GRACE_S = 15.0
PORT_WAIT_S = 15.0
# The bridges hold slots <prefix>/<n> (BRIDGE_SLOTS, 1 unless a module's extra_env says
# otherwise); backend client ids hold a "/", which no device serial can.
CHAOS_BRIDGE_PREFIX = "chaos-bridge"
CHAOS_BRIDGE_ID = f"{CHAOS_BRIDGE_PREFIX}/0"  # slot 0's client id

# Timers short enough that a few hundred commands and reminders settle in seconds; the applied
# window outlasts every outage a scenario stages (see docs/configuration.md on APPLIED_WINDOW_S).
FAST_TIMERS: dict[str, str] = {
    "ACK_TIMEOUT_S": "1.5",
    "RETRY_BACKOFF_S": "0.5,1,2",
    "RETRY_JITTER_RATIO": "0.1",
    "APPLIED_WINDOW_S": "6",
    "DISPATCH_LEASE_S": "5",
    "DISPATCH_SWEEP_AFTER_S": "2",
    "EVENT_SWEEP_AFTER_S": "3",
    "BEAT_SWEEP_INTERVAL_S": "1",
    "COMMAND_SWEEP_INTERVAL_S": "1",
    "DEVICE_FRESHNESS_S": "3600",
    "EVENT_RETRY_BACKOFF_S": "0.5,1,2",
    "SCHEDULER_LEASE_S": "5",
    "SCHEDULER_POLL_INTERVAL_S": "1",
    "SCHEDULER_STALE_INTERVAL_S": "1",
    "SCHEDULER_BACKOFF_MINUTES": "0.02,0.05,0.1",
    "NOTIFY_BACKOFF_S": "0.5,1,2",
    "NOTIFY_LEASE_S": "5",
    "NOTIFY_SWEEP_INTERVAL_S": "1",
    "NOTIFY_SWEEP_AFTER_S": "3",
    "NOTIFY_WEBHOOK_TIMEOUT_S": "5",
    "BRIDGE_SESSION_EXPIRY_S": "600",
    "BRIDGE_LEASE_S": "5",  # a bridge restarted after a SIGKILL waits out the dead one's lease
    "BRIDGE_DEVICE_RATE_PER_S": "0",
    "LOG_LEVEL": "INFO",
    "LOG_FORMAT": "console",
}

# The test's webhook receiver listens on loopback, where webhooks go only when allowed
# (notifications.destinations): the workers allow it, as an on-premises deployment would.
LOOPBACK_WEBHOOKS = "127.0.0.0/8"

# One worker per stage, shaped like deploy/Procfile (threads where the work waits on I/O).
WORKERS: dict[str, tuple[str, int]] = {
    "ingest": ("prefork", 2),
    "evaluate": ("prefork", 2),
    "dispatch": ("threads", 4),
    "reconcile": ("prefork", 2),
    "scheduler": ("prefork", 1),
    "notify": ("threads", 4),
    "events": ("prefork", 2),
}


def port_open(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.settimeout(0.2)
        return probe.connect_ex(("127.0.0.1", port)) == 0


@dataclass
class Proc:
    """One named process of the stack: how to start it, and its current incarnation."""

    name: str
    argv: Sequence[str]
    env: Mapping[str, str]
    log: Path
    popen: subprocess.Popen[bytes] | None = None
    starts: int = 0
    kills: int = 0
    down_on_purpose: bool = False  # stopped or killed by the test, not crashed

    def start(self) -> None:
        if self.alive:
            raise RuntimeError(f"{self.name} is already running")
        with self.log.open("ab") as out:
            out.write(f"\n===== start #{self.starts + 1} of {self.name} =====\n".encode())
            out.flush()
            self.popen = subprocess.Popen(
                list(self.argv),
                cwd=ROOT,
                env=dict(self.env),
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its own process group: killpg takes the pool too
            )
        self.starts += 1
        self.down_on_purpose = False

    @property
    def alive(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    def kill(self) -> None:
        """SIGKILL the whole process group: no shutdown handler runs, nothing is acked."""
        if self.popen is None:
            return
        self.down_on_purpose = True
        _signal_group(self.popen, signal.SIGKILL)
        self.popen.wait()
        self.kills += 1

    def stop(self, grace_s: float = STOP_GRACE_S) -> None:
        """SIGTERM (a warm shutdown), then SIGKILL if it outlives the grace period."""
        self.down_on_purpose = True
        if self.popen is None or self.popen.poll() is not None:
            if self.popen is not None:
                _signal_group(self.popen, signal.SIGKILL)  # orphaned pool children, if any
            return
        _signal_group(self.popen, signal.SIGTERM)
        try:
            self.popen.wait(grace_s)
        except subprocess.TimeoutExpired:
            _signal_group(self.popen, signal.SIGKILL)
            self.popen.wait()
        _signal_group(self.popen, signal.SIGKILL)

    def tail(self, lines: int = 40) -> str:
        if not self.log.exists():
            return ""
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])


def _signal_group(popen: subprocess.Popen[bytes], sig: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(popen.pid, sig)


@dataclass
class Servers:
    """Private Redis (Celery broker and coordination cache) and Mosquitto for one test."""

    workdir: Path
    redis_port: int = field(default_factory=free_port)
    mqtt_port: int = field(default_factory=free_port)
    redis: Proc | None = None
    mosquitto: Proc | None = None

    def start(self) -> None:
        env = {"PATH": os.environ.get("PATH", "")}
        self.redis = Proc(
            "redis",
            [
                "redis-server",
                "--port",
                str(self.redis_port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--maxmemory-policy",
                "noeviction",
            ],
            env,
            self.workdir / "redis.log",
        )
        conf = self.workdir / "mosquitto.conf"
        (self.workdir / "mosquitto-data").mkdir(exist_ok=True)
        conf.write_text(
            f"listener {self.mqtt_port} 127.0.0.1\n"
            "allow_anonymous true\n"
            "persistence true\n"
            f"persistence_location {self.workdir / 'mosquitto-data'}/\n"
            "max_queued_messages 100000\n"
            "set_tcp_nodelay true\n" + ("user root\n" if os.geteuid() == 0 else "")
            # As root Mosquitto drops to the mosquitto user, who cannot write our directory.
        )
        self.mosquitto = Proc(
            "mosquitto", ["mosquitto", "-c", str(conf)], env, self.workdir / "mosquitto.log"
        )
        self.redis.start()
        self.mosquitto.start()
        self.wait_up()

    def wait_up(self) -> None:
        wait_for(lambda: port_open(self.redis_port), "private redis-server", PORT_WAIT_S)
        wait_for(lambda: port_open(self.mqtt_port), "private mosquitto", PORT_WAIT_S)

    def mosquitto_restart(self, down_s: float) -> None:
        """A broker restart: clean shutdown (persistence saved), a pause, start again."""
        assert self.mosquitto is not None
        self.mosquitto.stop()
        time.sleep(down_s)
        self.mosquitto.start()
        wait_for(lambda: port_open(self.mqtt_port), "mosquitto back up", PORT_WAIT_S)

    def redis_flushall(self) -> None:
        import redis

        redis.Redis(host="127.0.0.1", port=self.redis_port).flushall()

    def stop(self) -> None:
        for proc in (self.mosquitto, self.redis):
            if proc is not None:
                proc.stop(grace_s=5)

    @property
    def broker_url(self) -> str:
        return f"redis://127.0.0.1:{self.redis_port}/1"


@dataclass
class Stack:
    """The project's processes against one test database and the private servers."""

    servers: Servers
    database_name: str
    workdir: Path
    procs: dict[str, Proc] = field(default_factory=dict)
    # Settings one module's scenarios need on top of FAST_TIMERS (its own stack only).
    extra_env: Mapping[str, str] = field(default_factory=dict)

    def env(self, name: str) -> dict[str, str]:
        base = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST", "COV_"))}
        base.update(FAST_TIMERS)
        base.update({"BRIDGE_SLOT_PREFIX": CHAOS_BRIDGE_PREFIX, "BRIDGE_SLOTS": "1"})
        base.update(self.extra_env)
        base.update(
            {
                "DJANGO_SETTINGS_MODULE": "config.settings.test",
                "DATABASE_URL": (
                    f"postgres://postgres@127.0.0.1:5432/{self.database_name}"
                    f"?application_name=chaos-{name}"
                ),
                "REDIS_URL": f"redis://127.0.0.1:{self.servers.redis_port}/0",
                "CELERY_BROKER_URL": self.servers.broker_url,
                "MQTT_URL": f"mqtt://127.0.0.1:{self.servers.mqtt_port}",
                "MEDIA_ROOT": str(self.workdir / "media"),
                "WEBHOOK_ALLOWED_NETWORKS": LOOPBACK_WEBHOOKS,
                "PYTHONUNBUFFERED": "1",
            }
        )
        return base

    def define(self, name: str, argv: Sequence[str], logdir: Path | None = None) -> Proc:
        proc = Proc(name, argv, self.env(name), (logdir or self.workdir) / f"{name}.log")
        self.procs[name] = proc
        return proc

    def simulator_define(self, args: Sequence[str], logdir: Path) -> Proc:
        """Each scenario's devices: a simulator process of its own, logging beside it."""
        py = str(BIN / "python")
        return self.define("simulator", [py, "manage.py", "device_simulator", *args], logdir)

    def bridge_define(self, name: str = "bridge") -> Proc:
        """A bridge process holding its share of the stack's BRIDGE_SLOTS slots: a second
        one ("bridge-2") beside "bridge" takes over for it, or shares the slots."""
        py = str(BIN / "python")
        return self.define(name, [py, "manage.py", "mqtt_bridge", "--progress-interval", "0"])

    def bridge_slot_ids(self) -> list[str]:
        """The client ids of the slots the stack's bridges hold between them."""
        env = self.env("bridge")
        prefix, slots = env["BRIDGE_SLOT_PREFIX"], int(env["BRIDGE_SLOTS"])
        return [f"{prefix}/{n}" for n in range(slots)]

    def build(self) -> None:
        celery = str(BIN / "celery")
        self.bridge_define("bridge")
        for stage, (pool, concurrency) in WORKERS.items():
            self.define(
                f"worker-{stage}",
                [
                    celery, "-A", "config", "worker", "-Q", stage, "-n", f"{stage}@chaos",
                    "--pool", pool, "--concurrency", str(concurrency),
                    "--without-gossip", "--without-mingle", "--without-heartbeat",
                ],
            )  # fmt: skip
        for beat in ("beat", "beat-2"):
            self.define(
                beat,
                [
                    celery, "-A", "config", "beat",
                    "-S", "django_celery_beat.schedulers:DatabaseScheduler",
                    "--max-interval", "1",
                ],
            )  # fmt: skip

    def run_once(self, *args: str) -> None:
        """A one-off management command in the stack's environment (migrate-like setup)."""
        subprocess.run(
            [str(BIN / "python"), "manage.py", *args],
            cwd=ROOT,
            env=self.env("setup"),
            check=True,
            capture_output=True,
        )

    def start(self, *names: str) -> None:
        for name in names:
            self.procs[name].start()

    def stop_all(self) -> None:
        """Warm shutdown of every process at once (each in its own thread), the simulator
        last: it writes its counters when it stops."""
        others = [p for n, p in self.procs.items() if n != "simulator"]
        threads = [threading.Thread(target=p.stop) for p in others]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        if "simulator" in self.procs:
            self.procs["simulator"].stop()

    def dead(self) -> list[str]:
        """Processes that exited on their own (a crash, not a staged kill or stop)."""
        return [
            f"{p.name} (exit {p.popen.returncode})"
            for p in self.procs.values()
            if p.popen is not None and p.popen.poll() is not None and not p.down_on_purpose
        ]

    def tails(self) -> str:
        return "\n".join(
            f"----- {p.name} -----\n{p.tail()}" for p in self.procs.values() if p.starts
        )


@dataclass(frozen=True)
class SimulatorCounters:
    """What the simulator process saw: requests received and applies per (serial,
    commandId), final values."""

    applies: dict[tuple[str, str], int]
    values: dict[str, dict[str, Any]]
    requests: dict[tuple[str, str], int] = field(default_factory=dict)


def counters_read(path: Path) -> SimulatorCounters:
    data = json.loads(path.read_text()) if path.exists() else {}
    by_command = [
        ((serial, command_id), counts)
        for serial, by_id in data.get("commands", {}).items()
        for command_id, counts in by_id.items()
    ]
    return SimulatorCounters(
        applies={key: counts.get("applies", 0) for key, counts in by_command},
        values=data.get("values", {}),
        requests={key: counts.get("requests", 0) for key, counts in by_command},
    )


@dataclass
class Hook:
    """A webhook receiver: counts POSTs per notification id (a second one is a duplicate)."""

    server: http.server.ThreadingHTTPServer
    posts: Counter[str] = field(default_factory=Counter)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/hook"


@contextlib.contextmanager
def webhook_receiver() -> Iterator[Hook]:
    """A ``Hook`` on a free loopback port, shut down when the block ends."""
    posts: Counter[str] = Counter()
    lock = threading.Lock()

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            with lock:
                posts[self.headers.get("X-Farm-Notification-Id", "?")] += 1
            self.send_response(200)
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            return None

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield Hook(server, posts)
    finally:
        server.shutdown()
