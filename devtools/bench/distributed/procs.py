"""The product's processes as children of the bench: started from their command lines as
``deploy/Procfile.dev`` starts them, each in a process group of its own (a prefork worker's
pool goes down with it), logging to a file of the run, and always torn down: SIGTERM to the
group, SIGKILL after a grace period."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

from devtools.bench.distributed.plan import WorkerSpec

STOP_GRACE_S = 20.0
MANAGE = "manage.py"


@dataclass
class Child:
    """One named child process and its log."""

    name: str
    argv: Sequence[str]
    log: Path
    popen: subprocess.Popen[bytes] | None = None

    def start(self, env: Mapping[str, str], cwd: Path) -> None:
        with self.log.open("ab") as out:
            self.popen = subprocess.Popen(
                list(self.argv),
                cwd=cwd,
                env=dict(env),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its own group: a signal reaches the pool too
            )

    @property
    def pid(self) -> int:
        return self.popen.pid if self.popen is not None else -1

    @property
    def alive(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    def signal_group(self, sig: int) -> None:
        if self.popen is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.popen.pid, sig)

    def tail(self, lines: int = 15) -> str:
        if not self.log.exists():
            return ""
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])


def python_argv(*args: str) -> list[str]:
    return [sys.executable, *args]


def celery_argv(*args: str) -> list[str]:
    return [sys.executable, "-m", "celery", "-A", "config", *args]


def bridge_argv() -> list[str]:
    """A bridge process: the slots it holds come from BRIDGE_SLOTS and BRIDGE_SLOT_PREFIX."""
    return python_argv(MANAGE, "mqtt_bridge")


# As deploy/ starts every worker: no gossip, mingle or event heartbeats, which cost broker
# commands and CPU on every worker each second and serve only Flower's worker list.
WORKER_QUIET = ("--without-gossip", "--without-mingle", "--without-heartbeat")


def worker_argv(stage: str, spec: WorkerSpec, node: str) -> list[str]:
    """As the Procfile starts a stage worker; the node name carries the run so a ping
    can tell the bench's workers from any other on the broker."""
    return celery_argv(
        "worker", "-Q", stage, "-n", node, "--pool", spec.pool, "--concurrency",
        str(spec.concurrency), "--loglevel", "WARNING", *WORKER_QUIET,
    )  # fmt: skip


def beat_argv() -> list[str]:
    return celery_argv(
        "beat", "-S", "django_celery_beat.schedulers:DatabaseScheduler", "--loglevel", "WARNING"
    )


@dataclass
class Children:
    """Every child of a run, stopped all at once (each group signalled, then waited for)."""

    cwd: Path
    env: Mapping[str, str]
    procs: dict[str, Child] = field(default_factory=dict)

    def start(self, child: Child) -> Child:
        self.procs[child.name] = child
        child.start(self.env, self.cwd)
        return child

    def dead(self) -> list[Child]:
        return [c for c in self.procs.values() if c.popen is not None and not c.alive]

    def stop(self, names: Sequence[str] | None = None, grace_s: float = STOP_GRACE_S) -> None:
        chosen = [self.procs[n] for n in names] if names is not None else list(self.procs.values())
        for child in chosen:
            if child.alive:
                child.signal_group(signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        for child in chosen:
            if child.popen is None:
                continue
            with contextlib.suppress(subprocess.TimeoutExpired):
                child.popen.wait(max(0.1, deadline - time.monotonic()))
            child.signal_group(signal.SIGKILL)  # the rest, and any orphaned pool child
            with contextlib.suppress(subprocess.TimeoutExpired):
                child.popen.wait(5)
        for child in chosen:
            self.procs.pop(child.name, None)


class CpuMeter:
    """CPU time of each process and its descendants (a prefork pool) over an interval, as %
    of one core; a process that is not a child of the bench (its own) counts alone."""

    MACHINE = "machine"  # every core of the machine busy = 100, whoever keeps it busy

    def __init__(self, pids: Mapping[str, int], *, servers: bool = False) -> None:
        """``servers``: ``pids`` include the database server, whose backends serving the
        bench itself are left out (``bench_backends``)."""
        self._pids = dict(pids)
        self._servers = servers
        self._own = bench_backends() if servers else frozenset()
        self._started = time.monotonic()
        self._before = {name: tree_cpu_by_process(pid) for name, pid in self._pids.items()}
        self._machine = psutil.cpu_times()

    def percent(self) -> dict[str, float]:
        elapsed = self.elapsed_s()
        out = {name: used / elapsed * 100 for name, used in self.used_s().items()}
        out[self.MACHINE] = _busy_percent(self._machine, psutil.cpu_times())
        return out

    def elapsed_s(self) -> float:
        return max(1e-6, time.monotonic() - self._started)

    def used_s(self) -> dict[str, float]:
        """CPU seconds of each process (and its pool) since the meter started; a descendant
        that exited meanwhile is not counted (its time went with it)."""
        out: dict[str, float] = {}
        own = (self._own | bench_backends()) if self._servers else self._own
        for name, pid in self._pids.items():
            before = self._before[name]
            now = tree_cpu_by_process(pid)
            out[name] = sum(
                max(0.0, t - before.get(key, 0.0)) for key, t in now.items() if key[0] not in own
            )
        return out


def bench_backends() -> frozenset[int]:
    """The PostgreSQL backends serving the bench's own connections (its settle polls and
    its accounting): their CPU is the bench's, not the stack's, and would otherwise be
    charged to the crossings with the rest of the server's. Matched by this process's
    local TCP ports; empty when the database is not PostgreSQL over TCP."""
    from django.db import connection

    if connection.vendor != "postgresql":
        return frozenset()
    try:
        ports = {c.laddr.port for c in psutil.Process().net_connections(kind="tcp") if c.raddr}
    except psutil.Error:
        return frozenset()
    with connection.cursor() as cur:
        cur.execute("SELECT pid, client_port FROM pg_stat_activity WHERE client_port > 0")
        return frozenset(pid for pid, port in cur.fetchall() if port in ports)


def _busy_percent(before: Any, after: Any) -> float:
    """Share of all cores' time not idle between two ``psutil.cpu_times()`` readings: the
    servers (PostgreSQL, the brokers) and anything else on the machine show here."""
    idle = (after.idle - before.idle) + (
        getattr(after, "iowait", 0.0) - getattr(before, "iowait", 0.0)
    )
    total = sum(after) - sum(before)
    return max(0.0, 100 * (1 - idle / total)) if total > 0 else 0.0


def tree_cpu_s(pid: int) -> float:
    """User + system seconds of ``pid`` and its live descendants; a pool child that exited
    meanwhile takes its time with it (celery recycles none by default)."""
    return sum(tree_cpu_by_process(pid).values())


def tree_cpu_by_process(pid: int) -> dict[tuple[int, float], float]:
    """CPU seconds of ``pid`` and each live descendant, keyed by (pid, start time), so an
    interval can count a process that started meanwhile whole and one that exited not at
    all (a PostgreSQL backend whose connection was recycled), never as negative time."""
    try:
        root = psutil.Process(pid)
        own = pid == os.getpid()  # the bench's descendants are the stack, measured apart
        procs = [root, *([] if own else root.children(recursive=True))]
    except psutil.Error:
        return {}
    out: dict[tuple[int, float], float] = {}
    for proc in procs:
        with contextlib.suppress(psutil.Error):
            times = proc.cpu_times()
            out[proc.pid, proc.create_time()] = times.user + times.system
    return out
