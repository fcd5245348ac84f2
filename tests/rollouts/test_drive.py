"""The rollout driver on PostgreSQL: canary, then a ramp counted on applied targets, under
the rate and each farm's cap; abort criteria trip exactly at their thresholds; pause and
resume keep the plan; a continuous rollout takes in a device provisioned mid-run; a manual
hold and a higher-priority rule outrank it."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.contrib.auth.models import User

from automation.models import CommandTransition, DeviceCommand
from automation.states import CommandOrigin, CommandStatus
from rollouts.models import Rollout, RolloutTarget, RolloutTransition
from rollouts.services.counts import rollout_count
from rollouts.services.drive import rollout_tick
from rollouts.services.lifecycle import RolloutMoveRefused, rollout_act
from rollouts.states import RolloutStatus, SkipReason, TargetStep
from tests.rollouts.fleet import finish, make_fleet, sent_commands

pytestmark = [pytest.mark.django_db(transaction=False)]

T0 = datetime(2026, 12, 4, 12, 0, tzinfo=UTC)


@pytest.fixture
def olga(db: None) -> User:
    return User.objects.create_user(username="olga", password="pw")


def _at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def test_the_canary_goes_first_and_the_ramp_waits_for_its_outcome(olga: User) -> None:
    fleet = make_fleet(per_farm=10)
    rollout = fleet.rollout(olga, now=T0, canary_size=3)
    tick = rollout_tick(rollout.pk, now=_at(1))
    assert tick is not None and len(tick.commands) == 3
    canary = sent_commands(rollout)
    assert DeviceCommand.objects.filter(pk__in=canary, origin=CommandOrigin.ROLLOUT).count() == 3
    keys = set(
        DeviceCommand.objects.filter(pk__in=canary).values_list("idempotency_key", flat=True)
    )
    assert keys == {f"rollout:{rollout.pk}:{e.pk}" for e in fleet.endpoints()[:3]}
    # The canary is live: nothing more starts, however long we wait.
    for s in (10, 70, 130):
        assert rollout_tick(rollout.pk, now=_at(s)).commands == []
    finish(canary, CommandStatus.APPLIED, _at(131))
    assert rollout_tick(rollout.pk, now=_at(132)).commands == []  # the ramp starts now
    started = rollout_tick(rollout.pk, now=_at(142)).commands  # 10 s at 6/min
    assert len(started) == 1
    assert rollout_count(rollout.pk)["pending"] == 6


def test_waves_respect_the_rate_and_the_per_farm_cap(olga: User) -> None:
    fleet = make_fleet(farms=2, per_farm=30)
    rollout = fleet.rollout(
        olga,
        now=T0,
        canary_size=1,
        base_rate_per_minute=30.0,
        max_rate_per_minute=30.0,
        max_live_per_farm=4,
        ramp_every_applied=1000,
    )
    rollout_tick(rollout.pk, now=_at(0))
    finish(sent_commands(rollout), CommandStatus.APPLIED, _at(1))
    rollout_tick(rollout.pk, now=_at(2))  # the ramp starts
    starts: list[tuple[float, int]] = []
    for step in range(1, 61):  # two minutes of 2 s ticks; the devices never answer
        at = 2 + 2 * step
        tick = rollout_tick(rollout.pk, now=_at(at))
        starts.append((at, len(tick.commands)))
        live = DeviceCommand.objects.filter(
            rollout_target__rollout=rollout, status=CommandStatus.PENDING_DISPATCH
        )
        for farm in fleet.farms:
            assert live.filter(target_device__farm=farm).count() <= 4
    assert sum(n for _, n in starts) == 8  # both farms full: the cap holds the rest
    # Free the farms: from then on, no 60 s window starts more than the rate.
    finish(sent_commands(rollout, CommandStatus.PENDING_DISPATCH), CommandStatus.APPLIED, _at(200))
    starts = []
    for step in range(1, 91):
        at = 200 + 2 * step
        tick = rollout_tick(rollout.pk, now=_at(at))
        if tick is None:  # every target applied: completed, the driver leaves it
            break
        starts.append((at, len(tick.commands)))
        finish(tick.commands, CommandStatus.APPLIED, _at(at))
    assert Rollout.objects.get(pk=rollout.pk).status == RolloutStatus.COMPLETED
    for begin, _ in starts:
        window = sum(n for at, n in starts if begin <= at < begin + 60)
        assert window <= 30
    # And it does go at the rate: the 51 left took about 51 / 30 minutes.
    assert sum(n for _, n in starts) == 60 - 9
    assert starts[-1][0] - 200 <= 51 / 30 * 60 + 12


def test_the_ramp_counts_applied_targets_only(olga: User) -> None:
    fleet = make_fleet(per_farm=40)
    rollout = fleet.rollout(
        olga,
        now=T0,
        canary_size=4,
        base_rate_per_minute=6.0,
        increment_factor=2.0,
        ramp_every_applied=4,
        max_rate_per_minute=1000.0,
    )
    rollout_tick(rollout.pk, now=_at(0))
    canary = sent_commands(rollout)
    finish(canary, CommandStatus.APPLIED, _at(1))  # 4 applied: the first step is due
    rollout_tick(rollout.pk, now=_at(2))
    assert Rollout.objects.get(pk=rollout.pk).rate_per_minute == 12.0
    rollout_tick(rollout.pk, now=_at(62))
    wave = sent_commands(rollout, CommandStatus.PENDING_DISPATCH)
    assert wave
    # Acknowledged, dispatched, failed: none of them counts for the ramp.
    finish(wave, CommandStatus.DISPATCHED, _at(63))
    rollout_tick(rollout.pk, now=_at(64))
    assert Rollout.objects.get(pk=rollout.pk).rate_per_minute == 12.0
    finish(wave, CommandStatus.UNCERTAIN, _at(65))
    rollout_tick(rollout.pk, now=_at(66))
    assert Rollout.objects.get(pk=rollout.pk).rate_per_minute == 12.0
    # Four more applied (six in all from the ramp's start at four): the second step.
    for s in range(70, 400, 10):
        rollout_tick(rollout.pk, now=_at(s))
        if len(sent_commands(rollout, CommandStatus.PENDING_DISPATCH)) >= 4:
            break
    more = sent_commands(rollout, CommandStatus.PENDING_DISPATCH)
    finish(more[:3], CommandStatus.APPLIED, _at(401))
    rollout_tick(rollout.pk, now=_at(402))
    assert Rollout.objects.get(pk=rollout.pk).rate_per_minute == 12.0  # 7 applied
    finish(more[3:4], CommandStatus.APPLIED, _at(403))
    rollout_tick(rollout.pk, now=_at(404))
    assert Rollout.objects.get(pk=rollout.pk).rate_per_minute == 24.0


@pytest.mark.parametrize(
    ("outcome", "status"),
    [
        ("failed", CommandStatus.FAILED),
        ("expired", CommandStatus.EXPIRED),
        ("uncertain", CommandStatus.UNCERTAIN),
        ("any", CommandStatus.FAILED),
    ],
)
def test_each_abort_criterion_trips_exactly_at_its_threshold(
    olga: User, outcome: str, status: str
) -> None:
    fleet = make_fleet(per_farm=30)
    criterion = {"outcome": outcome, "min_finished": 10, "threshold_pct": 20}
    rollout = fleet.rollout(olga, now=T0, canary_size=10, abort_criteria=[criterion])
    rollout_tick(rollout.pk, now=_at(0))
    canary = sent_commands(rollout)
    assert len(canary) == 10
    # 9 finished, 2 of them bad (22%): under min_finished, no trip.
    finish(canary[:2], status, _at(1))
    finish(canary[2:9], CommandStatus.APPLIED, _at(1))
    rollout_tick(rollout.pk, now=_at(2))
    assert Rollout.objects.get(pk=rollout.pk).status == RolloutStatus.RUNNING
    if outcome == "any":  # the other bad ends count too
        finish(canary[9:], CommandStatus.UNCERTAIN, _at(3))
        bad = 3
    else:
        finish(canary[9:], CommandStatus.APPLIED, _at(3))
        bad = 2
    # 10 finished, 2 (or 3) bad: 20% (30%) reaches the threshold.
    tick = rollout_tick(rollout.pk, now=_at(4))
    rollout.refresh_from_db()
    assert tick.moved_to == RolloutStatus.ABORTED == rollout.status
    assert rollout.tripped["criterion"] == criterion
    assert rollout.tripped["count"] == bad and rollout.tripped["finished"] == 10
    counts = rollout_count(rollout.pk)
    assert counts["pending"] == 0 and counts["skipped"] == 20
    assert set(
        RolloutTarget.objects.filter(rollout=rollout, step=TargetStep.SKIPPED).values_list(
            "reason", flat=True
        )
    ) == {SkipReason.ABORTED}
    transition = RolloutTransition.objects.filter(rollout=rollout).latest("pk")
    assert transition.to_status == RolloutStatus.ABORTED and outcome in transition.reason


def test_one_under_the_threshold_does_not_trip(olga: User) -> None:
    fleet = make_fleet(per_farm=20)
    criterion = {"outcome": "failed", "min_finished": 10, "threshold_pct": 20}
    rollout = fleet.rollout(olga, now=T0, canary_size=10, abort_criteria=[criterion])
    rollout_tick(rollout.pk, now=_at(0))
    canary = sent_commands(rollout)
    finish(canary[:1], CommandStatus.FAILED, _at(1))  # 10%
    finish(canary[1:], CommandStatus.APPLIED, _at(1))
    rollout_tick(rollout.pk, now=_at(2))
    assert Rollout.objects.get(pk=rollout.pk).status == RolloutStatus.RUNNING


def test_pause_and_resume_keep_the_plan(olga: User) -> None:
    fleet = make_fleet(per_farm=30)
    rollout = fleet.rollout(olga, now=T0, canary_size=2, ramp_every_applied=2)
    rollout_tick(rollout.pk, now=_at(0))
    finish(sent_commands(rollout), CommandStatus.APPLIED, _at(1))
    rollout_tick(rollout.pk, now=_at(2))
    rollout_tick(rollout.pk, now=_at(32))
    before = Rollout.objects.get(pk=rollout.pk)
    rollout_act(rollout_id=rollout.pk, action="pause", actor=olga, reason="wind", now=_at(33))
    for s in (40, 100, 400):
        assert not rollout_tick(rollout.pk, now=_at(s))  # paused: the driver does not take it
    sent_before = len(sent_commands(rollout))
    with pytest.raises(RolloutMoveRefused):
        rollout_act(rollout_id=rollout.pk, action="pause", actor=olga, reason="again", now=_at(34))
    rollout_act(rollout_id=rollout.pk, action="resume", actor=olga, reason="calm", now=_at(500))
    after = Rollout.objects.get(pk=rollout.pk)
    plan = ("rate_per_minute", "ramp_next_applied", "canary_left", "ramping", "waves")
    assert [getattr(after, f) for f in plan] == [getattr(before, f) for f in plan]
    # No burst for the time paused: the budget starts again from the resume.
    assert rollout_tick(rollout.pk, now=_at(501)).commands == []
    burst = after.rate_per_minute * 10 / 60  # ROLLOUT_BURST_S worth of the rate
    assert 0 < len(rollout_tick(rollout.pk, now=_at(520)).commands) <= burst
    assert len(sent_commands(rollout)) > sent_before
    moves = list(
        RolloutTransition.objects.filter(rollout=rollout, actor=olga)
        .exclude(from_status="")
        .values_list("from_status", "to_status")
    )
    assert moves == [("running", "paused"), ("paused", "running")]


def test_a_continuous_rollout_takes_in_a_device_provisioned_mid_run(olga: User) -> None:
    fleet = make_fleet(per_farm=3)
    rollout = fleet.rollout(olga, now=T0, canary_size=10, mode="continuous")
    rollout_tick(rollout.pk, now=_at(0))
    finish(sent_commands(rollout), CommandStatus.APPLIED, _at(1))
    rollout_tick(rollout.pk, now=_at(2))
    assert Rollout.objects.get(pk=rollout.pk).status == RolloutStatus.RUNNING  # still open
    late = fleet.add_device(fleet.farms[0], "VENT-LATE")
    for s in (12, 22, 32):
        rollout_tick(rollout.pk, now=_at(s))
    command = DeviceCommand.objects.get(rollout_target__rollout=rollout, target_device=late)
    assert command.idempotency_key.startswith(f"rollout:{rollout.pk}:")


def test_a_manual_hold_outranks_the_rollout(olga: User) -> None:
    from automation.services.manual import endpoint_command_manual

    fleet = make_fleet(per_farm=4)
    held = fleet.endpoints()[0]
    manual = endpoint_command_manual(
        endpoint_id=held.pk, value=True, actor=olga, reason="keep it open", now=T0
    )
    rollout = fleet.rollout(olga, now=T0, canary_size=4)
    rollout_tick(rollout.pk, now=_at(1))
    target = RolloutTarget.objects.get(rollout=rollout, endpoint=held)
    assert (target.step, target.reason) == (TargetStep.SKIPPED, SkipReason.MANUAL_OVERRIDE)
    assert DeviceCommand.objects.get(pk=manual.command.pk).status == CommandStatus.PENDING_DISPATCH
    assert len(sent_commands(rollout)) == 3
    assert CommandTransition.objects.filter(command__rollout_target__rollout=rollout).count() == 3


def test_a_held_lease_keeps_a_second_driver_out_until_it_runs_out(olga: User) -> None:
    from rollouts.services.drive import rollout_claim

    fleet = make_fleet(per_farm=5)
    rollout = fleet.rollout(olga, now=T0, canary_size=5)
    assert rollout_claim(rollout.pk, _at(0)) is not None  # a driver killed after its claim
    assert rollout_tick(rollout.pk, now=_at(1)) is None
    assert sent_commands(rollout) == []
    tick = rollout_tick(rollout.pk, now=_at(31))  # ROLLOUT_LEASE_S later
    assert tick is not None and len(tick.commands) == 5
    again = rollout_tick(rollout.pk, now=_at(32))  # a redelivered tick: nothing twice
    assert again is not None and again.commands == []
    assert DeviceCommand.objects.filter(rollout_target__rollout=rollout).count() == 5


def test_a_pause_during_a_tick_rolls_the_tick_back(olga: User) -> None:
    from rollouts.services import drive

    fleet = make_fleet(per_farm=5)
    rollout = fleet.rollout(olga, now=T0, canary_size=5)
    step = drive._step

    def paused_meanwhile(r: Rollout, tick: drive.Tick, now: datetime) -> None:
        step(r, tick, now)
        Rollout.objects.filter(pk=r.pk).update(version=r.version + 7)  # another writer

    drive._step = paused_meanwhile  # type: ignore[assignment]
    try:
        tick = rollout_tick(rollout.pk, now=_at(1))
    finally:
        drive._step = step  # type: ignore[assignment]
    assert tick is not None and tick.commands == []
    assert not DeviceCommand.objects.filter(rollout_target__rollout=rollout).exists()
    assert rollout_count(rollout.pk)["pending"] == 5


def test_a_pause_is_in_the_audit_log_and_the_drivers_ticks_are_not(olga: User) -> None:
    """The rollout is configuration the audit log follows: a person's move is an entry; the
    driver's lease and position are run-time columns, which write none."""
    from common.audit.models import AuditEntry

    fleet = make_fleet(per_farm=3)
    rollout = fleet.rollout(olga, now=T0, canary_size=2)

    def entries() -> list[dict[str, list[str]]]:
        rows = AuditEntry.objects.get_for_object(Rollout(pk=rollout.pk)).order_by("pk")
        return [e.changes for e in rows]

    before = entries()
    rollout_tick(rollout.pk, now=_at(0))
    assert entries() == before
    rollout_act(rollout_id=rollout.pk, action="pause", actor=olga, reason="wind", now=_at(3))
    assert entries()[-1]["status"] == ["running", "paused"]
    waves = RolloutTarget.objects.filter(rollout=rollout, wave=1)
    assert waves.filter(step=TargetStep.SENT).count() == 2  # the wave's record: its targets
