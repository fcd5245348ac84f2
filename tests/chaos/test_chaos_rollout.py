"""A fleet rollout under a lost dispatcher and a lost driver: 500 simulated relays (one
target endpoint each, five farms) get one value in waves while two beat processes tick the
driver. Mid-rollout (more than the canary sent, not every target), the dispatch worker is
SIGKILLed while it holds claims, then the scheduler worker (which runs ``rollouts.drive``)
while a tick holds the rollout's lease; both start again. The rollout still completes with
exactly one command per target (key ``rollout:{rolloutId}:{endpointId}``), each applied once
on its device and moved into ``applied`` by one transition, and its counters equal a direct
count of the ledger. A killed tick's wave rolls back with its transaction and its lease frees
itself after ROLLOUT_LEASE_S; a killed dispatcher's claims come back after DISPATCH_LEASE_S
and go out again under the same commandId, which the simulator replays (a repeated delivery,
counted and reported, not a second command)."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.db.models import Count
from django.utils import timezone

from automation.models import CommandTransition, DeviceCommand
from automation.states import (
    COMMAND_DISPATCHABLE,
    COMMAND_LIVE,
    CommandOrigin,
    CommandStatus,
    ReasonCode,
)
from rollouts.models import Rollout, RolloutTarget
from rollouts.services.counts import rollout_count
from rollouts.states import RolloutStatus, TargetStep
from tests.chaos.conftest import START_TIMEOUT_S, stack_running
from tests.chaos.harness import Proc, Stack, counters_read
from tests.chaos.report import SUMMARY
from tests.rollouts.fleet import Fleet, make_fleet
from tests.waiting import wait_for

# No django_db mark: the stack's processes share the committed rows (see test_chaos.py).
pytestmark = [pytest.mark.chaos, pytest.mark.postgres]

FARMS, PER_FARM = 5, 100  # 500 relays, each with the one "vent" endpoint the rollout sets
# The driver's settings in every process of this module's stack. One tick a second per beat,
# two with two beats: django-celery-beat keeps whole seconds, and a sub-second interval is
# stored as 0 by DatabaseScheduler.setup_schedule (IntegerField), which makes every beat
# send the task in a tight loop once it reloads its schedule from the database.
ROLLOUT_TIMERS = {"ROLLOUT_TICK_INTERVAL_S": "1", "ROLLOUT_LEASE_S": "3"}
CANARY = 10
BASE_RATE_PER_MIN = 3000.0  # 50 targets a second once the canary has finished clean
MAX_RATE_PER_MIN = 6000.0
RAMP_EVERY_APPLIED = 100
LIVE_PER_FARM = 50
DOWN_S = 1.0  # before the killed workers are started again (their start takes longer)
# Each kill waits for the ramp (more than the canary sent) and its moment (claims held, a
# lease held); from KILL_BY_SENT sent on it no longer waits for the moment.
KILL_BY_SENT = 250
KILL_WAIT_S = 60.0
RESTART_WAIT_S = 60.0
SETTLE_TIMEOUT_S = 120.0


@pytest.fixture(scope="module")
def rollout_stack(
    django_db_setup: None, django_db_blocker: Any, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Stack]:
    """The chaos stack with the driver's fast settings in every process."""
    with stack_running(django_db_blocker, tmp_path_factory, ROLLOUT_TIMERS) as stack:
        yield stack


@dataclass
class Run:
    stack: Stack
    fleet: Fleet
    counters_path: Path


@pytest.fixture
def rollout_run(rollout_stack: Stack, django_db_blocker: Any, tmp_path: Path) -> Iterator[Run]:
    """500 relays in the database and in a simulator process; afterwards the stack is put
    back as it was (the second beat stopped, anything left down started)."""
    stack = rollout_stack
    with django_db_blocker.unblock():
        fleet = make_fleet(farms=FARMS, per_farm=PER_FARM)
        serials = [d.serial_number for d in fleet.devices]
        counters = tmp_path / "simulator-counters.json"
        args = ["--serials", ",".join(serials), "--values", '{"vent": true}',
                "--telemetry-interval", "0", "--progress-interval", "1",
                "--counters", str(counters), "--client-id", "chaos-rollout-simulator"]  # fmt: skip
        simulator = stack.simulator_define(args, tmp_path)
        simulator.start()
        try:
            wait_for(
                lambda: b"devices on" in simulator.log.read_bytes(), "simulator", START_TIMEOUT_S
            )
            yield Run(stack, fleet, counters)
        finally:
            simulator.stop()
            stack.procs["beat-2"].stop()
            for proc in stack.procs.values():
                if proc.name not in ("simulator", "beat-2") and not proc.alive:
                    proc.start()


@dataclass(frozen=True)
class Kills:
    dispatch_at: int  # targets sent when the dispatch worker was killed
    claims_lost: int  # commands it had claimed and not yet marked dispatched
    scheduler_at: int  # targets sent when the scheduler worker was killed
    tick_cut: bool  # a tick held the lease when its worker died (its wave rolled back)


def _sent(rollout: Rollout) -> int:
    return RolloutTarget.objects.filter(rollout=rollout, step=TargetStep.SENT).count()


def _claimed(rollout: Rollout) -> int:
    """The rollout's commands a dispatcher holds: leased, not yet marked dispatched."""
    return DeviceCommand.objects.filter(
        rollout_target__rollout=rollout,
        status__in=COMMAND_DISPATCHABLE,
        lease_expires_at__gt=timezone.now(),
    ).count()


def _lease_held(rollout: Rollout) -> bool:
    return Rollout.objects.filter(pk=rollout.pk, lease_expires_at__isnull=False).exists()


def _kill_mid_wave(run: Run, rollout: Rollout, total: int) -> Kills:
    """Once the ramp runs (more than the canary sent): SIGKILL the dispatch worker while it
    holds claims, then the scheduler worker while a tick holds the rollout's lease (from
    KILL_BY_SENT sent on, each without waiting for that); then start both again."""
    dispatch, scheduler = run.stack.procs["worker-dispatch"], run.stack.procs["worker-scheduler"]
    dispatch_at = claims_lost = scheduler_at = 0
    tick_cut = False
    deadline = time.monotonic() + KILL_WAIT_S
    while scheduler.alive:
        assert time.monotonic() < deadline, f"no mid-wave moment within {KILL_WAIT_S:.0f}s"
        state = Rollout.objects.values_list("status", flat=True).get(pk=rollout.pk)
        sent = _sent(rollout)
        assert state == RolloutStatus.RUNNING and sent < total, (
            f"the rollout ran ({state}, {sent}/{total} sent) before the kills"
        )
        late = sent >= KILL_BY_SENT
        if sent <= CANARY:
            pass
        elif dispatch.alive and (late or _claimed(rollout)):
            dispatch.kill()
            dispatch_at, claims_lost = sent, _claimed(rollout)
        elif not dispatch.alive and (late or _lease_held(rollout)):
            scheduler.kill()
            # Nobody else ticks now: a lease still held is the killed tick's.
            scheduler_at, tick_cut = sent, _lease_held(rollout)
        time.sleep(0.005)
    time.sleep(DOWN_S)
    for proc in (scheduler, dispatch):
        proc.start()
    for proc in (scheduler, dispatch):
        _wait_ready(proc)
    return Kills(dispatch_at, claims_lost, scheduler_at, tick_cut)


def _wait_ready(worker: Proc) -> None:
    def ready() -> bool:
        return worker.log.read_bytes().count(b" ready.") >= worker.starts

    wait_for(ready, f"{worker.name} restarted", RESTART_WAIT_S)


def _settle(run: Run, rollout: Rollout) -> None:
    def settled() -> bool:
        state = Rollout.objects.values_list("status", flat=True).get(pk=rollout.pk)
        live = DeviceCommand.objects.filter(
            rollout_target__rollout=rollout, status__in=COMMAND_LIVE
        ).exists()
        return state != RolloutStatus.RUNNING and not live

    try:
        wait_for(settled, "the rollout ended and its commands final", SETTLE_TIMEOUT_S, 0.2)
    except AssertionError:
        print(run.stack.tails())  # the problems below name what was left


def test_a_rollout_survives_a_killed_driver_and_dispatcher_under_two_beats(
    rollout_run: Run,
) -> None:
    run = rollout_run
    started = time.monotonic()
    run.stack.start("beat-2")
    user = User.objects.create_user(username=f"rollout-chaos-{time.monotonic_ns()}")
    rollout = run.fleet.rollout(
        user,
        name="chaos: vents closed fleet-wide",
        canary_size=CANARY,
        base_rate_per_minute=BASE_RATE_PER_MIN,
        max_rate_per_minute=MAX_RATE_PER_MIN,
        increment_factor=2.0,
        ramp_every_applied=RAMP_EVERY_APPLIED,
        max_live_per_farm=LIVE_PER_FARM,
    )
    total = rollout.targets.count()
    assert total == FARMS * PER_FARM
    kills = _kill_mid_wave(run, rollout, total)
    _settle(run, rollout)
    run.stack.procs["simulator"].stop()  # it writes its counters as it stops
    seconds = time.monotonic() - started
    rollout.refresh_from_db()
    problems, redelivered, duplicated = _problems(run, rollout)
    _summary_add(rollout, kills, total, duplicated, seconds)
    print(
        f"rollout #{rollout.pk}: {rollout.status} in {seconds:.1f}s, {rollout.waves} waves; "
        f"dispatch killed at {kills.dispatch_at}/{total} sent holding {kills.claims_lost} "
        f"claims, scheduler at {kills.scheduler_at}/{total} sent "
        f"({'mid-tick' if kills.tick_cut else 'between ticks'}); {redelivered} commands "
        "delivered to their device more than once under the same commandId"
    )
    assert problems == [], "\n".join(problems)


def _summary_add(
    rollout: Rollout, kills: Kills, total: int, duplicated: int, seconds: float
) -> None:
    """The scenario's line in the chaos table (no readings, no reminders)."""
    commands = DeviceCommand.objects.filter(rollout_target__rollout=rollout)
    applied = commands.filter(status=CommandStatus.APPLIED).count()
    tick = "mid-tick" if kills.tick_cut else "between ticks"
    SUMMARY.append(
        (
            f"rollout {total}, 2 beats: SIGKILL dispatch at {kills.dispatch_at} sent "
            f"({kills.claims_lost} claims), scheduler at {kills.scheduler_at} ({tick})",
            0,
            commands.count(),
            applied,
            commands.filter(attempt_count__gt=1).count(),
            commands.filter(status=CommandStatus.UNCERTAIN).count(),
            commands.filter(status_reason=ReasonCode.SUPERSEDED).count(),
            commands.filter(status__in=[CommandStatus.FAILED, CommandStatus.EXPIRED])
            .exclude(status_reason=ReasonCode.SUPERSEDED)
            .count(),
            0,
            total - applied,
            duplicated,
            f"{seconds:.0f}",
        )
    )


def _ledger_count(rollout: Rollout) -> dict[str, int]:
    """The rollout's counters counted straight from the ledger: unsent targets by step, and
    the commands its key names by status."""
    direct: Counter[str] = Counter(
        dict(
            RolloutTarget.objects.filter(rollout=rollout)
            .exclude(step=TargetStep.SENT)
            .values_list("step")
            .annotate(n=Count("pk"))
            .order_by()
        )
    )
    direct.update(
        dict(
            DeviceCommand.objects.filter(
                origin=CommandOrigin.ROLLOUT, idempotency_key__startswith=f"rollout:{rollout.pk}:"
            )
            .values_list("status")
            .annotate(n=Count("pk"))
            .order_by()
        )
    )
    return {state: n for state, n in direct.items() if n}


def _problems(run: Run, rollout: Rollout) -> tuple[list[str], int, int]:
    """(problems, commands the simulator received more than once, duplicates: a target with
    a second command or a command applied twice on its device)."""
    problems: list[str] = []
    if rollout.status != RolloutStatus.COMPLETED:
        problems.append(f"rollout #{rollout.pk} ended {rollout.status}, not completed")
    counted = {state: n for state, n in rollout_count(rollout.pk).by_state.items() if n}
    direct = _ledger_count(rollout)
    if counted != direct:
        problems.append(f"rollout_count {counted} != the ledger's {direct}")
    targets = list(RolloutTarget.objects.filter(rollout=rollout).select_related("endpoint__device"))
    endpoints = [t.endpoint_id for t in targets]
    ours = list(
        DeviceCommand.objects.filter(
            origin=CommandOrigin.ROLLOUT, target_device_endpoint__in=endpoints
        )
    )
    commands = {c.target_device_endpoint_id: c for c in ours}
    per_endpoint = Counter(c.target_device_endpoint_id for c in ours)
    applied_moves = Counter(
        CommandTransition.objects.filter(
            command__in=[c.pk for c in commands.values()], to_status=CommandStatus.APPLIED
        ).values_list("command_id", flat=True)
    )
    counters = counters_read(run.counters_path)
    seen: dict[str, set[str]] = {}
    for serial, command_id in counters.requests:
        seen.setdefault(serial, set()).add(command_id)
    duplicated = 0
    for target in targets:
        endpoint, serial = target.endpoint_id, target.endpoint.device.serial_number
        n = per_endpoint[endpoint]
        if target.step != TargetStep.SENT:
            problems.append(f"target {endpoint} ({serial}) ended {target.step} {target.reason}")
            if n:
                problems.append(f"target {endpoint} is {target.step} but has {n} commands")
            continue
        if n != 1:
            duplicated += n > 1
            problems.append(f"target {endpoint} ({serial}) has {n} rollout commands, not one")
        command = commands.get(endpoint)
        if command is None:
            continue
        if target.command_id != command.pk:
            problems.append(f"target {endpoint} points at {target.command_id}, not {command.pk}")
        if command.idempotency_key != f"rollout:{rollout.pk}:{endpoint}":
            problems.append(f"command {command.pk} has key {command.idempotency_key}")
        if command.status != CommandStatus.APPLIED:
            problems.append(
                f"command {command.pk} ({serial}) ended {command.status}/{command.status_reason}: "
                + _chain(command)
            )
        if applied_moves[command.pk] != 1:
            problems.append(
                f"command {command.pk} moved into applied {applied_moves[command.pk]} times"
            )
        device_id = command.device_command_id or ""
        others = seen.get(serial, set()) - {device_id}
        if others:
            duplicated += 1
            problems.append(f"{serial} received other commandIds {sorted(others)}")
        applies = counters.applies.get((serial, device_id), 0)
        if applies > 1:
            duplicated += 1
        if applies != 1:
            problems.append(f"{serial} applied {device_id} {applies} times, not once")
    dead = run.stack.dead()
    if dead:
        problems.append(f"processes died on their own: {', '.join(dead)}")
    redelivered = sum(n > 1 for n in counters.requests.values())
    return problems, redelivered, duplicated


def _chain(command: DeviceCommand) -> str:
    steps = command.transitions.order_by("at").values_list("to_status", "reason_code")
    return " → ".join(f"{to}({why})" for to, why in steps)
