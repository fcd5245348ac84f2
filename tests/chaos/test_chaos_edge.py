"""Nothing a device sent is lost when one part of the edge dies (issue 39's acceptance).

A sensor fleet publishes distinct QoS 1 readings at ~100/s to a private Mosquitto, and counts
every reading the broker PUBACKed; rules on some farms' sensors switch relays that a device
simulator process answers. While that runs, one part dies: the ingest, evaluate and reconcile
workers with the Celery broker restarted empty, a bridge host lost for good, or a bridge
recreated under a new host name. Once everything has settled, each scenario asserts the same
promise, on Redis and on RabbitMQ as the Celery broker:

* every PUBACKed reading is one telemetry row, and each of its values that a rule reads one
  endpoint event (the others are kept in the telemetry row alone);
* every such event was evaluated once (processed or discarded, never left pending or failed,
  at most one execution per event, rule and target);
* every command the device applied ends ``applied``, and no device applied one twice.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from functools import partial
from pathlib import Path
from typing import Any

import pytest
from django.db import connection
from django.db.models import Count

from automation.models import AutomationEndpointEvent, AutomationRuleExecution, DeviceCommand
from automation.states import COMMAND_TERMINAL, CommandStatus, EventStatus, ReasonCode
from devices.models import DeviceMessageRejection, Telemetry
from tests.chaos.celery_brokers import (
    BrokerKind,
    CeleryBroker,
    EdgeServers,
    rabbitmq_unreachable,
)
from tests.chaos.conftest import START_TIMEOUT_S, _test_database
from tests.chaos.harness import CHAOS_BRIDGE_PREFIX, Proc, Stack, counters_read
from tests.chaos.puback_fleet import NO_MATCHING_SUBSCRIBERS, PubackFleet, Reading
from tests.chaos.report import SUMMARY
from tests.devices.factories import FarmKit, make_farm
from tests.waiting import wait_for

# No django_db mark: the stack's processes share committed rows (see tests/chaos/test_chaos.py).
pytestmark = [pytest.mark.chaos, pytest.mark.postgres]

SENSORS = 30  # one farm each, with its relay
RULED = 12  # farms whose sensor's temperature switches their relay (the rest only report)
READINGS = 2400  # 80 per sensor
RATE_PER_S = 100.0
PUBLISH_TIMEOUT_S = READINGS / RATE_PER_S + 60  # the fleet's pace, and a loaded machine
SETTLE_TIMEOUT_S = 150.0
LEASE_S = 4.0  # BRIDGE_LEASE_S: short, so a lost bridge's slot is adopted within a scenario
LEASE_SLACK_S = 3.0  # a loaded 2-core machine may be a tick late
OTHER_HOST = "other-host"
# The command retry ladder outlasts the longest reply outage staged here (the bridge down for
# ~10 s while the host name changes), as production's does (5 + 5 + 5 + 15 + 5 ≈ 35 s) for a
# bridge restart: the chaos timers' ladder (~6 s) would expire a command whose device applied
# it before its ack, kept in the slot's session, could be read.
LADDER: dict[str, str] = {"ACK_TIMEOUT_S": "3", "RETRY_BACKOFF_S": "2,8"}
RELAY_START = '{"io1": false, "fan": 0, "mode": "auto"}'
# Mosquitto's line for every connection: "New client connected from <addr> as <id> (p5, c0,
# k30)", where c0 is a clean start of false: the client keeps a session when it goes.
CONNECTED = re.compile(rb"New client connected from \S+ as (\S+) \(p\d, c([01])")
SHOWN = 15  # missing readings, commands and so on listed in a failure's story

BROKERS = [
    pytest.param(BrokerKind.REDIS, id="redis"),
    pytest.param(BrokerKind.RABBITMQ, id="rabbitmq"),
]


@pytest.fixture(scope="module")
def edge_database(django_db_setup: None, django_db_blocker: Any) -> Iterator[None]:
    """The test database for the processes of every scenario, flushed once the module is
    done (each scenario brings its own farms, so none reads another's rows)."""
    with django_db_blocker.unblock():
        if connection.vendor != "postgresql":
            pytest.skip("chaos runs the real processes against PostgreSQL (see .ci/run)")
        missing = [b for b in ("redis-server", "mosquitto") if shutil.which(b) is None]
        if missing:
            pytest.skip(f"chaos starts private servers and needs: {', '.join(missing)}")
        with _test_database():
            try:
                yield
            finally:
                from django.core.management import call_command

                call_command("flush", interactive=False, verbosity=0)


@pytest.fixture(params=BROKERS)
def broker(request: pytest.FixtureRequest) -> CeleryBroker:
    kind: BrokerKind = request.param
    if kind is BrokerKind.RABBITMQ:
        reason = rabbitmq_unreachable()
        if reason:
            pytest.skip(reason)
    return CeleryBroker(kind)


@dataclass
class Story:
    """What happened when, for a failure's message."""

    started: float = field(default_factory=time.monotonic)
    lines: list[str] = field(default_factory=list)

    def note(self, what: str) -> None:
        self.lines.append(f"{time.monotonic() - self.started:6.1f}s {what}")

    def __str__(self) -> str:
        return "\n".join(self.lines)


@dataclass
class Edge:
    """One scenario's running system: servers, processes, farms, relays and the fleet."""

    broker: CeleryBroker
    servers: EdgeServers
    stack: Stack
    kits: list[FarmKit]
    fleet: PubackFleet
    counters_path: Path
    story: Story

    @property
    def sensor_ids(self) -> list[int]:
        return [k.sensor.pk for k in self.kits]

    @property
    def relay_ids(self) -> list[int]:
        return [k.actuator.pk for k in self.kits]


def slot_ids(slots: int) -> list[str]:
    return [f"{CHAOS_BRIDGE_PREFIX}/{n}" for n in range(slots)]


def slot_holders(slots: int) -> dict[str, str]:
    """Each slot's live holder (``host:pid:random``), or "" while nobody's lease runs."""
    from django.utils import timezone

    from devices.selectors import bridge_slots_read

    now = timezone.now()
    states = bridge_slots_read(client_ids=slot_ids(slots))
    held = {s.client_id: s.holder for s in states if s.held(now) and s.connected}
    return {client_id: held.get(client_id, "") for client_id in slot_ids(slots)}


def holder_pid(holder: str) -> int | None:
    parts = holder.split(":")
    return int(parts[1]) if len(parts) == 3 and parts[1].isdigit() else None


def bridge_define(stack: Stack, broker: CeleryBroker, name: str, host: str = "") -> Proc:
    """The harness's bridge process (its share of the stack's BRIDGE_SLOTS slots) on the
    scenario's broker; ``host`` runs it in a UTS namespace of its own under that host name."""
    proc = stack.bridge_define(name)
    proc.argv = broker.launched(proc.argv)
    if host:
        proc.argv = ["unshare", "--uts", "sh", "-c", f'hostname {host} && exec "$@"', "sh",
                     *proc.argv]  # fmt: skip
    return proc


def unshare_refused() -> str | None:
    """Why a process cannot be given a host name of its own here, or None."""
    if shutil.which("unshare") is None:
        return "unshare is not installed"
    probe = subprocess.run(
        ["unshare", "--uts", "sh", "-c", f"hostname {OTHER_HOST}"], capture_output=True
    )
    if probe.returncode:
        return f"unshare --uts is not permitted here: {probe.stderr.decode().strip()}"
    return None


def fleet_create(stamp: str) -> list[FarmKit]:
    """Farms of one sensor and one relay; on the first RULED, temp > 30 switches io1 on and
    temp < 20 switches it off."""
    kits = [make_farm(prefix=f"EDGE{stamp}-{n:02d}") for n in range(SENSORS)]
    for kit in kits[:RULED]:
        kit.rule(target_endpoint=kit.io1, operator="gt", threshold_value=30,
                 target_value=True, name="hot io1")  # fmt: skip
        kit.rule(target_endpoint=kit.io1, operator="lt", threshold_value=20,
                 target_value=False, name="cool io1")  # fmt: skip
    return kits


@contextmanager
def edge_running(
    broker: CeleryBroker,
    tmp_path: Path,
    *,
    slots: int,
    bridges: Sequence[str] = ("bridge",),
) -> Iterator[Edge]:
    """Private Redis and Mosquitto, the Celery broker of the scenario, one worker per stage,
    beat, the named bridge processes (``slots`` slots between them), the farms, the relays'
    simulator and the fleet; everything stopped afterwards, the broker's queues deleted."""
    story = Story()
    servers = EdgeServers(tmp_path)
    servers.celery_url = broker.url(servers)
    servers.start()
    stack = Stack(
        servers,
        connection.settings_dict["NAME"],
        tmp_path,
        extra_env={
            **broker.env(),
            **LADDER,
            "BRIDGE_SLOTS": str(slots),
            "BRIDGE_LEASE_S": str(LEASE_S),
        },
    )
    fleet: PubackFleet | None = None
    try:
        with broker.producer(servers):
            stack.build()
            for proc in list(stack.procs.values()):
                proc.argv = broker.launched(proc.argv)
            for name in bridges[1:]:  # the harness defines "bridge"
                bridge_define(stack, broker, name)
            stack.run_once("sync_beat_schedule")
            kits = fleet_create(f"{time.monotonic_ns() % 10**6}")
            counters = tmp_path / "simulator-counters.json"
            relays = ",".join(k.actuator.serial_number for k in kits)
            simulator = stack.simulator_define(
                ["--serials", relays, "--values", RELAY_START, "--telemetry-interval", "0",
                 "--progress-interval", "1", "--counters", str(counters),
                 "--client-id", "edge-simulator"],
                tmp_path,
            )  # fmt: skip
            stack.start(*(n for n in stack.procs if n != "beat-2"))
            _wait_ready(stack, slots)
            wait_for(lambda: _log_has(simulator, b"devices on"), "simulator", START_TIMEOUT_S)
            fleet = PubackFleet(servers.mqtt_port, [k.sensor.serial_number for k in kits])
            story.note(f"stack up on {broker.kind}: slots {slot_holders(slots)}")
            yield Edge(broker, servers, stack, kits, fleet, counters, story)
    finally:
        if fleet is not None:
            fleet.close()
        stack.stop_all()
        servers.stop()
        broker.cleanup()


def _log_has(proc: Proc, marker: bytes) -> bool:
    return proc.log.exists() and marker in proc.log.read_bytes()


def _wait_ready(stack: Stack, slots: int) -> None:
    """Every slot held by a connected bridge, every worker consuming."""
    wait_for(
        lambda: all(slot_holders(slots).values()), f"{slots} bridge slots held", START_TIMEOUT_S
    )
    for proc in stack.procs.values():
        if proc.name.startswith("worker-"):
            wait_for(partial(_log_has, proc, b" ready."), proc.name, START_TIMEOUT_S)


# ----------------------------------------------------------------------------------------
# The scenarios


def test_workers_stopped_and_celery_broker_restarted_empty(
    edge_database: None, broker: CeleryBroker, tmp_path: Path
) -> None:
    """The ingest, evaluate and reconcile workers SIGKILLed while readings and device replies
    keep arriving; the Celery broker then restarted empty (Redis killed and started with
    nothing; RabbitMQ's stage queues deleted); the workers back."""
    with edge_running(broker, tmp_path, slots=1) as edge:
        stopped = ("worker-ingest", "worker-evaluate", "worker-reconcile")
        edge.fleet.start(READINGS, RATE_PER_S)
        edge.fleet.wait_sent(0.25, PUBLISH_TIMEOUT_S)
        for name in stopped:
            edge.stack.procs[name].kill()
        edge.story.note(f"SIGKILLed {', '.join(stopped)} at reading {edge.fleet.sent}")
        edge.fleet.wait_sent(0.5, PUBLISH_TIMEOUT_S)
        # A RabbitMQ node lost takes every consumer's connection with it: the workers still
        # up are stopped while the queues go, and start again with the others.
        others = [
            p
            for n, p in edge.stack.procs.items()
            if n.startswith("worker-") and n not in stopped and broker.kind is BrokerKind.RABBITMQ
        ]
        for proc in others:
            proc.stop()
        restart = broker.restart_empty(edge.servers)
        edge.story.note(f"{restart.dropped} at reading {edge.fleet.sent}")
        edge.fleet.wait_sent(0.7, PUBLISH_TIMEOUT_S)
        for proc in [*(edge.stack.procs[n] for n in stopped), *others]:
            proc.start()
        edge.story.note(f"workers started again at reading {edge.fleet.sent}")
        _finish(edge, f"workers down, broker restarted empty [{broker.kind}]", slots=1)


def test_two_bridges_one_sigkilled_never_restarted(
    edge_database: None, broker: CeleryBroker, tmp_path: Path
) -> None:
    """Two bridge processes with one slot each; one SIGKILLed a third of the way in and
    never restarted. The other holds its slot within BRIDGE_LEASE_S, resumes that slot's
    session and drains what Mosquitto kept in it."""
    with edge_running(broker, tmp_path, slots=2, bridges=("bridge", "bridge-2")) as edge:
        victim, survivor = edge.stack.procs["bridge"], edge.stack.procs["bridge-2"]
        assert victim.popen is not None and survivor.popen is not None
        both = {victim.popen.pid, survivor.popen.pid}
        # The first bridge up may take both slots and hand one over (fair share) once the
        # second is live: a slot is briefly unheld meanwhile. Wait for the shared state.
        try:
            wait_for(
                lambda: {holder_pid(h) for h in slot_holders(2).values()} == both,
                "each bridge process holding one slot",
                START_TIMEOUT_S,
            )
        except AssertionError:
            raise AssertionError(
                f"each bridge process should hold one slot: {slot_holders(2)}"
            ) from None
        holders = slot_holders(2)
        lost = next(c for c, h in holders.items() if holder_pid(h) == victim.popen.pid)
        edge.fleet.start(READINGS, RATE_PER_S)
        edge.fleet.wait_sent(1 / 3, PUBLISH_TIMEOUT_S)
        victim.kill()
        killed_at = time.monotonic()
        edge.story.note(f"SIGKILLed the bridge holding {lost} at reading {edge.fleet.sent}")
        survivor_pid = survivor.popen.pid
        adopted = wait_for(
            lambda: holder_pid(slot_holders(2)[lost]) == survivor_pid and slot_holders(2),
            f"the surviving bridge (pid {survivor_pid}) to hold {lost}",
            LEASE_S + LEASE_SLACK_S + 30,  # past the bound, to tell late from never
            poll_s=0.1,
        )
        took_s = time.monotonic() - killed_at
        edge.story.note(f"{lost} adopted after {took_s:.1f}s: {adopted}")
        assert took_s <= LEASE_S + LEASE_SLACK_S, (
            f"{lost} adopted {took_s:.1f}s after its bridge died; BRIDGE_LEASE_S is {LEASE_S}"
            f"\n{edge.story}"
        )
        _finish(edge, f"two bridges, one lost for good [{broker.kind}]", slots=2)


def test_bridge_restarted_on_new_host_name_leaves_no_orphaned_session(
    edge_database: None, broker: CeleryBroker, tmp_path: Path
) -> None:
    """The bridge stopped, readings published while it is down (Mosquitto keeps them in the
    slot's session), then started again under another host name, as a recreated container
    is: it connects with the slot's client id, not one made of its host name, and drains
    the session; nothing published meanwhile is lost."""
    refused = unshare_refused()
    if refused:
        pytest.skip(refused)
    with edge_running(broker, tmp_path, slots=1) as edge:
        bridge = edge.stack.procs["bridge"]
        edge.fleet.start(READINGS, RATE_PER_S)
        edge.fleet.wait_sent(1 / 3, PUBLISH_TIMEOUT_S)
        bridge.stop()
        edge.story.note(f"bridge stopped at reading {edge.fleet.sent}")
        down_from = edge.fleet.sent
        edge.fleet.wait_sent(2 / 3, PUBLISH_TIMEOUT_S)
        down_until = edge.fleet.sent
        moved = bridge_define(edge.stack, broker, "bridge", host=OTHER_HOST)
        moved.start()
        edge.story.note(f"bridge started on host {OTHER_HOST} at reading {edge.fleet.sent}")
        holder = wait_for(
            lambda: slot_holders(1)[f"{CHAOS_BRIDGE_PREFIX}/0"], "the moved bridge to hold slot 0"
        )
        edge.story.note(f"slot 0 held by {holder}")
        assert holder.split(":")[0] == OTHER_HOST, (
            f"slot 0 should be held from {OTHER_HOST}, is by {holder}\n{edge.story}"
        )
        outcome = _finish(edge, f"bridge back on a new host name [{broker.kind}]", slots=1)
        while_down = [r for r in outcome.accepted if down_from <= _index(edge, r) < down_until]
        assert while_down, "no reading was published while the bridge was down"
        assert not set(while_down) & set(outcome.missing)
        # Publishers (the dispatcher's farm-publisher/<host>-<pid>) start clean and leave
        # nothing behind; a session is kept only for a client id that connected with c0.
        kept = _session_client_ids(edge)
        edge.story.note(f"client ids that kept a session on Mosquitto: {sorted(kept)}")
        assert kept == {f"{CHAOS_BRIDGE_PREFIX}/0"}, (
            f"sessions kept on Mosquitto for {sorted(kept)}: only the slot's "
            f"{CHAOS_BRIDGE_PREFIX}/0 may hold one, under either host name\n{edge.story}"
        )


def _index(edge: Edge, reading: Reading) -> int:
    """The reading's place in the fleet's run (round-robin over the sensors)."""
    return reading.seq * len(edge.fleet.serials) + edge.fleet.serials.index(reading.serial)


def _session_client_ids(edge: Edge) -> set[str]:
    """Every client id that connected to Mosquitto asking it to keep a session."""
    assert edge.servers.mosquitto is not None
    lines = CONNECTED.findall(edge.servers.mosquitto.log.read_bytes())
    return {client_id.decode() for client_id, clean in lines if clean == b"0"}


# ----------------------------------------------------------------------------------------
# Settling and the acceptance


@dataclass
class Outcome:
    accepted: list[Reading]
    missing: list[Reading]
    problems: list[str]
    commands: int = 0
    applied: int = 0
    duplicated: int = 0  # readings stored twice, and commands a device applied twice


def _finish(edge: Edge, scenario: str, *, slots: int) -> Outcome:
    """Wait for the fleet's last PUBACK and for the system to settle, then check the
    acceptance; on failure the assertion tells the story with the processes' log tails."""
    wait_for(edge.fleet.done, "the broker's PUBACK of every reading", PUBLISH_TIMEOUT_S)
    accepted = edge.fleet.accepted()
    edge.story.note(f"fleet done: {edge.fleet.sent} sent, {len(accepted)} PUBACKed")
    try:
        wait_for(
            lambda: not any(_unsettled(edge, accepted).values()),
            "the system to settle",
            SETTLE_TIMEOUT_S,
            poll_s=0.5,
        )
        edge.story.note("settled")
    except AssertionError:
        edge.story.note(f"not settled: {_unsettled(edge, accepted)}")
    edge.stack.procs["simulator"].stop()  # it writes its counters as it stops
    outcome = _outcome(edge, accepted)
    commands = DeviceCommand.objects.filter(target_device_id__in=edge.relay_ids)
    for command in commands.exclude(status=CommandStatus.APPLIED)[:SHOWN]:
        edge.story.note(
            f"command {command.pk} ended {command.status}/{command.status_reason} after "
            f"{command.attempt_count} attempt(s), not applied by its device"
        )
    print(f"{scenario}:\n{edge.story}")  # shown with -rP, and beside a failure
    SUMMARY.append(
        (
            f"edge: {scenario}",
            len(accepted),
            outcome.commands,
            outcome.applied,
            commands.filter(attempt_count__gt=1).count(),
            commands.filter(status=CommandStatus.UNCERTAIN).count(),
            commands.filter(status_reason=ReasonCode.SUPERSEDED).count(),
            commands.filter(status__in=[CommandStatus.FAILED, CommandStatus.EXPIRED])
            .exclude(status_reason=ReasonCode.SUPERSEDED)
            .count(),
            0,
            len(outcome.missing),
            outcome.duplicated,
            f"{time.monotonic() - edge.story.started:.0f}",
        )
    )
    if outcome.problems:
        pytest.fail(
            "\n".join(
                [
                    *outcome.problems,
                    "----- story -----",
                    str(edge.story),
                    f"slots now: {slot_holders(slots)}",
                    edge.stack.tails(),
                    f"----- mosquitto -----\n{_mosquitto_tail(edge)}",
                ]
            ),
            pytrace=False,
        )
    # Enough traffic to mean something: commands decided, and most of them applied.
    assert outcome.commands >= RULED and outcome.applied > 0, str(edge.story)
    return outcome


def _mosquitto_tail(edge: Edge) -> str:
    assert edge.servers.mosquitto is not None
    return edge.servers.mosquitto.tail(25)


def _stored(edge: Edge) -> Counter[tuple[int, datetime]]:
    rows = Telemetry.objects.filter(device_id__in=edge.sensor_ids)
    return Counter(rows.values_list("device_id", "message_ts"))


def _unsettled(edge: Edge, accepted: list[Reading]) -> dict[str, int]:
    """What is still moving: readings not yet stored, events not yet evaluated, commands not
    yet final."""
    device_of = {k.sensor.serial_number: k.sensor.pk for k in edge.kits}
    stored = _stored(edge)
    return {
        "readings not stored": sum(
            1 for r in accepted if (device_of[r.serial], r.ts) not in stored
        ),
        "pending events": AutomationEndpointEvent.objects.filter(
            device_instance_endpoint__device_id__in=edge.sensor_ids,
            processing_status=EventStatus.PENDING,
        ).count(),
        "live commands": DeviceCommand.objects.filter(target_device_id__in=edge.relay_ids)
        .exclude(status__in=COMMAND_TERMINAL)
        .count(),
    }


def _outcome(edge: Edge, accepted: list[Reading]) -> Outcome:
    outcome = Outcome(accepted, [], [])
    problems = outcome.problems
    outcome.missing = _readings_problems(edge, outcome)
    _events_problems(edge, problems)
    _commands_problems(edge, outcome)
    left = {k: v for k, v in _unsettled(edge, accepted).items() if v}
    problems += [
        f"left unsettled: {what} = {n}" for what, n in left.items() if what != "readings not stored"
    ]
    dead = edge.stack.dead()
    if dead:
        problems.append(f"processes died on their own: {', '.join(dead)}")
    return outcome


def _readings_problems(edge: Edge, outcome: Outcome) -> list[Reading]:
    """Every PUBACKed reading stored once; the missing ones listed by sensor and sequence."""
    accepted, problems = outcome.accepted, outcome.problems
    device_of = {k.sensor.serial_number: k.sensor.pk for k in edge.kits}
    stored = _stored(edge)
    missing = [r for r in accepted if (device_of[r.serial], r.ts) not in stored]
    twice = {key: n for key, n in stored.items() if n > 1}
    if missing:
        by_sensor = Counter(r.serial for r in missing)
        first = ", ".join(f"{r.serial}#{r.seq}@{r.ts:%H:%M:%S.%f}" for r in missing[:SHOWN])
        problems.append(
            f"{len(missing)} of {len(accepted)} PUBACKed readings not stored "
            f"(per sensor: {dict(by_sensor.most_common(5))}…; first: {first})"
        )
        rejected = DeviceMessageRejection.objects.filter(
            serial_number__in=list(device_of)
        ).values_list("reason_code", flat=True)
        if rejected:
            problems.append(f"rejections of the fleet's messages: {dict(Counter(rejected))}")
    if twice:
        outcome.duplicated += len(twice)
        problems.append(f"{len(twice)} readings stored more than once: {list(twice)[:SHOWN]}")
    unheard = [p for p in edge.fleet.pubacks() if p.reason == NO_MATCHING_SUBSCRIBERS]
    if unheard and missing:
        problems.append(
            f"{len(unheard)} readings PUBACKed with no subscriber on Mosquitto's side (no "
            f"bridge session held the shared subscription): {unheard[:SHOWN]}"
        )
    refused = [p for p in edge.fleet.pubacks() if p.reason >= 0x80]
    if refused:
        problems.append(f"Mosquitto refused {len(refused)} readings: {refused[:SHOWN]}")
    unanswered = edge.fleet.unanswered()
    if unanswered:
        problems.append(f"{len(unanswered)} readings never PUBACKed: {unanswered[:SHOWN]}")
    return missing


def _events_problems(edge: Edge, problems: list[str]) -> None:
    """Each stored reading's values that a rule reads one event each (temp on the RULED
    farms; humidity, and the other farms' temp, are read by nothing), each evaluated once:
    processed or discarded, never pending or failed, one execution per rule and target at
    most, and at least one for an event that matched a rule."""
    events = AutomationEndpointEvent.objects.filter(
        device_instance_endpoint__device_id__in=edge.sensor_ids
    )
    telemetry = Telemetry.objects.filter(device_id__in=edge.sensor_ids)
    read = {k.sensor.pk for k in edge.kits[:RULED]}
    per_reading = Counter(
        dict(
            events.values_list("source_telemetry_id")
            .annotate(n=Count("pk"))
            .values_list("source_telemetry_id", "n")
        )
    )
    wrong = {
        pk: per_reading.get(pk, 0)
        for pk, device_id in telemetry.values_list("pk", "device_id")
        if per_reading.get(pk, 0) != (1 if device_id in read else 0)
    }
    if wrong:
        problems.append(
            f"{len(wrong)} readings without exactly one event per value a rule reads: "
            f"{list(wrong.items())[:SHOWN]}"
        )
    statuses = Counter(events.values_list("processing_status", flat=True))
    unevaluated = {s: n for s, n in statuses.items() if s not in EVALUATED}
    if unevaluated:
        problems.append(f"events not evaluated: {unevaluated} (all: {dict(statuses)})")
    executions = AutomationRuleExecution.objects.filter(
        event__device_instance_endpoint__device_id__in=edge.sensor_ids
    )
    repeated = list(
        executions.values("event_id", "rule_id", "target_endpoint_id")
        .annotate(n=Count("pk"))
        .filter(n__gt=1)[:SHOWN]
    )
    if repeated:
        problems.append(f"events evaluated more than once: {repeated}")
    bare = events.filter(processing_status=EventStatus.PROCESSED, executions__isnull=True)
    if bare.exists():
        problems.append(
            f"{bare.count()} processed events without an execution: "
            f"{list(bare.values_list('pk', flat=True)[:SHOWN])}"
        )


EVALUATED = {EventStatus.PROCESSED, EventStatus.DISCARDED}


def _commands_problems(edge: Edge, outcome: Outcome) -> None:
    """Every command its device applied ends ``applied``; no device applied one twice."""
    problems = outcome.problems
    counters = counters_read(edge.counters_path)
    serial_of = {k.actuator.pk: k.actuator.serial_number for k in edge.kits}
    intents = list(DeviceCommand.objects.filter(target_device_id__in=edge.relay_ids))
    twice = [key for key, n in counters.applies.items() if n > 1]
    if twice:
        outcome.duplicated += len(twice)
        problems.append(f"devices applied a command more than once: {twice[:SHOWN]}")
    wrong = [
        f"command {i.pk} ({serial_of[i.target_device_id]} {i.device_command_id}) "
        f"{i.status}/{i.status_reason}"
        for i in intents
        if counters.applies.get((serial_of[i.target_device_id], i.device_command_id or ""), 0)
        and i.status != CommandStatus.APPLIED
    ]
    if wrong:
        problems.append(
            f"{len(wrong)} commands the device applied are not applied: {wrong[:SHOWN]}"
        )
    if not counters.applies:
        problems.append(f"the simulator's counters are empty ({edge.counters_path})")
    outcome.commands = len(intents)
    outcome.applied = sum(i.status == CommandStatus.APPLIED for i in intents)
