"""The deployed stack as children of the bench: the bridge(s), one worker per stage queue,
beat. Up means each worker answered a ping and each bridge slot is held by a connected
bridge; down means every process group stopped, the slots' broker sessions forgotten and
their rows deleted, whatever happened in between (Ctrl-C and SIGTERM included)."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path

from django.conf import settings

from config.env import MqttConfig
from config.env_bridge import bridge_slot_client_id
from devices.models import BridgeSlot
from devices.mqtt.client import forget_session
from devtools.bench import BenchError
from devtools.bench.distributed.broker import workers_answering
from devtools.bench.distributed.plan import DistributedPlan, WorkerSpec
from devtools.bench.distributed.procs import (
    Child,
    Children,
    beat_argv,
    bridge_argv,
    worker_argv,
)

START_TIMEOUT_S = 120.0
POLL_S = 0.5
Write = Callable[[str], None]


def bench_mqtt(run: str) -> MqttConfig:
    """The configured broker, with a shared-subscription group of the run's own, so a
    deployment's bridge on the same broker takes no share of the bench's messages."""
    configured: MqttConfig = settings.MQTT
    if configured.shared_group is None:
        return configured
    return replace(configured, shared_group=f"bench-{run}")


def child_env(mqtt: MqttConfig, extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The bench's own environment (the servers' URLs, any tunable) passed through, with
    the development settings, the run's shared group and any settings the run changes
    (``extra``: a soak's shortened retention)."""
    env = dict(os.environ) | dict(extra or {})
    env["DJANGO_SETTINGS_MODULE"] = "config.settings.dev"
    env["PYTHONUNBUFFERED"] = "1"
    if mqtt.shared_group is not None:
        env["MQTT_SHARED_GROUP"] = mqtt.shared_group
    return env


@dataclass
class Stack:
    run: str
    mqtt: MqttConfig
    children: Children
    logs: Path
    nodes: dict[str, str] = field(default_factory=dict)  # stage → celery node name
    bridges: list[str] = field(default_factory=list)  # the slots' MQTT client ids

    @property
    def procs(self) -> Mapping[str, Child]:
        return self.children.procs

    def node(self, stage: str) -> str:
        return f"{stage}.{self.run}@bench"

    def worker_start(self, stage: str, spec: WorkerSpec) -> None:
        node = self.node(stage)
        self.nodes[stage] = node
        argv = worker_argv(stage, spec, node)
        self.children.start(Child(stage, argv, self.logs / f"{stage}.log"))

    def worker_restart(self, stage: str, spec: WorkerSpec, write: Write) -> None:
        """Stop the stage's worker (a warm shutdown) and start it with another pool."""
        if stage in self.children.procs:
            self.children.stop([stage])
        self.worker_start(stage, spec)
        self.wait_ready(write, stages=[stage], bridges=False)

    def wait_ready(self, write: Write, *, stages: list[str], bridges: bool) -> None:
        """Until every named worker answers a ping and (with ``bridges``) every slot is held
        by a connected bridge; a child that exits meanwhile fails the run."""
        want = {self.nodes[s] for s in stages}
        started = time.monotonic()
        last = ""
        while True:
            self._check_alive()
            answered = workers_answering(sorted(want)) & want
            connected = (
                set(
                    BridgeSlot.objects.filter(client_id__in=self.bridges, connected=True)
                    .exclude(holder="")
                    .values_list("client_id", flat=True)
                )
                if bridges
                else set(self.bridges)
            )
            waiting = sorted(n.split(".")[0] for n in want - answered)
            waiting += [f"bridge {b}" for b in self.bridges if b not in connected]
            line = "ready" if not waiting else f"waiting for {', '.join(waiting)}"
            if line != last:
                write(f"  stack: {time.monotonic() - started:5.1f}s {line}")
                last = line
            if not waiting:
                return
            if time.monotonic() - started > START_TIMEOUT_S:
                raise BenchError(f"not ready in {START_TIMEOUT_S:.0f}s: {', '.join(waiting)}")
            time.sleep(POLL_S)

    def _check_alive(self) -> None:
        dead = self.children.dead()
        if dead:
            child = dead[0]
            raise BenchError(
                f"{child.name} exited with {child.popen.returncode if child.popen else '?'}; "
                f"its log ({child.log}) ends:\n{child.tail()}"
            )

    def check_alive(self) -> None:
        self._check_alive()

    def pids(self) -> dict[str, int]:
        """Each child's pid and the bench's own (it plays the fleet), for the CPU meter."""
        return {name: c.pid for name, c in self.children.procs.items()} | {"bench": os.getpid()}


@contextmanager
def stack_running(
    plan: DistributedPlan,
    run: str,
    logs: Path,
    write: Write,
    *,
    extra_env: Mapping[str, str] | None = None,
) -> Iterator[Stack]:
    """Bridges, stage workers and beat started and ready, each with ``extra_env`` over the
    bench's environment; all stopped on the way out."""
    foreign = workers_answering()
    if foreign:
        raise BenchError(
            f"Celery workers already consume this broker's queues ({', '.join(sorted(foreign))}):"
            " they would take a share of the bench's tasks. Stop them, or point "
            "CELERY_BROKER_URL at a broker (or Redis database) of the bench's own."
        )
    mqtt = bench_mqtt(run)
    # As many slots as bridge processes, under a prefix of the run's own: each process
    # ends up holding one (the first claims them all, then hands over its surplus).
    prefix = f"bench-bridge-{run}"
    slots_env = {"BRIDGE_SLOT_PREFIX": prefix, "BRIDGE_SLOTS": str(max(1, plan.bridges))}
    stack = Stack(
        run, mqtt, Children(Path.cwd(), child_env(mqtt, dict(extra_env or {}) | slots_env)), logs
    )
    try:
        for i in range(plan.bridges):
            stack.bridges.append(bridge_slot_client_id(prefix, i))
            name = f"bridge-{i}"
            stack.children.start(Child(name, bridge_argv(), logs / f"{name}.log"))
        for stage, spec in plan.stage_workers.items():
            stack.worker_start(stage, spec)
        stack.children.start(Child("beat", beat_argv(), logs / "beat.log"))
        write(f"  stack: started {len(stack.children.procs)} processes, logs in {logs}")
        stack.wait_ready(write, stages=list(stack.nodes), bridges=True)
        yield stack
    finally:
        write("  stack: stopping every process")
        stack.children.stop()
        for client_id in stack.bridges:
            forget_session(mqtt, client_id)
        BridgeSlot.objects.filter(client_id__in=stack.bridges).delete()
