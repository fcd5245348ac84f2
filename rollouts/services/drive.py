"""The rollout driver: beat ticks it, each tick bounded. A tick claims one rollout with a
lease and its version (as the scheduler claims due work), then in one transaction reads its
counters, checks the abort criteria and the farms' windows, picks up new devices (a
continuous rollout), ramps the rate on applied targets and starts the next wave; the tick
ends by releasing the lease only if the version is still its own, so a pause, a cancel or a
successor that took an expired lease rolls the whole tick back. Two beats, a redelivered
task or a killed worker therefore start nothing twice.

The plan (docs/rollouts.md): a canary of ``canary_size`` targets, started as the farms'
room allows; when every canary target has finished and no criterion tripped, the ramp
starts at ``base_rate_per_minute`` and multiplies by ``increment_factor`` each time another
``ramp_every_applied`` targets are applied (applied only: acknowledged or sent do not
count), up to ``max_rate_per_minute``; no farm ever has more than ``max_live_per_farm`` live
commands."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import F, Q
from django.utils import timezone

from automation.services.spine import Committed, hand_on_commit
from common.json_types import JsonValue
from common.ledger import ledger_move_row
from rollouts.models import Rollout
from rollouts.services.counts import Counts, rollout_count
from rollouts.services.lifecycle import rollout_move, unsent_stop
from rollouts.services.moves import ROLLOUTS
from rollouts.services.plan import local_instant
from rollouts.services.selection import rollout_selector, selector_endpoints, targets_insert
from rollouts.services.waves import wave_start
from rollouts.states import (
    ROLLOUT_DRIVEN,
    EndBehaviour,
    RolloutStatus,
    SkipReason,
    TargetMode,
    TargetStep,
)


class LeaseLost(RuntimeError):
    """Someone moved the rollout during the tick: the tick's writes are rolled back."""


@dataclass
class Tick:
    rollout_id: int
    commands: list[int] = field(default_factory=list)
    skipped: int = 0
    moved_to: str = ""


def rollouts_due(*, now: datetime, limit: int) -> list[int]:
    """Rollouts the driver should tick, least recently ticked first (bounded)."""
    free = Q(lease_expires_at__isnull=True) | Q(lease_expires_at__lt=now)
    return list(
        Rollout.objects.filter(free, status__in=ROLLOUT_DRIVEN)
        .order_by(F("ticked_at").asc(nulls_first=True), "pk")
        .values_list("pk", flat=True)[:limit]
    )


def rollout_claim(rollout_id: int, now: datetime) -> Rollout | None:
    """Take the rollout's lease (None when another driver holds it): a guarded update of the
    rollout as read with its lease free. Every write of the lease bumps the version, so the
    version read proves the lease is still free when the update lands."""
    rollout = Rollout.objects.filter(pk=rollout_id, status__in=ROLLOUT_DRIVEN).first()
    if rollout is None or (
        rollout.lease_expires_at is not None and rollout.lease_expires_at >= now
    ):
        return None
    lease = {"lease_expires_at": now + timedelta(seconds=settings.ROLLOUTS.lease_s)}
    return rollout if ledger_move_row(ROLLOUTS, rollout, sets=lease, now=now) else None


@dataclass(frozen=True)
class Windows:
    open: list[int]  # farms whose window is open now
    closed: list[int]  # farms whose window has ended
    farms: int


def farm_windows(rollout: Rollout, now: datetime) -> Windows:
    opened: list[int] = []
    closed: list[int] = []
    farms = list(rollout.farms.values_list("pk", "time_zone"))
    for pk, zone in farms:
        start = local_instant(rollout.start_local, zone)
        end = local_instant(rollout.end_local, zone)
        if end is not None and end <= now:
            closed.append(pk)
        elif start is None or start <= now:
            opened.append(pk)
    return Windows(opened, closed, len(farms))


def abort_tripped(rollout: Rollout, counts: Counts) -> dict[str, JsonValue] | None:
    """The first criterion that trips: at least ``min_finished`` targets finished and the
    outcome's share of them at or above ``threshold_pct``."""
    finished = counts.finished
    for criterion in rollout.abort_criteria:
        hits = counts.outcome(str(criterion["outcome"]))
        if finished >= criterion["min_finished"] and hits * 100 >= (
            criterion["threshold_pct"] * finished
        ):
            pct = round(100 * hits / finished, 2)
            return {"criterion": criterion, "finished": finished, "count": hits, "pct": pct}
    return None


def rollouts_drive(*, now: datetime) -> int:
    """Tick each rollout due (its lease free), at most ``ROLLOUTS.tick_batch``; a rollout
    another driver holds is skipped, so two beats or a redelivered task start nothing twice.
    Returns the commands started."""
    started = 0
    for rollout_id in rollouts_due(now=now, limit=settings.ROLLOUTS.tick_batch):
        tick = rollout_tick(rollout_id, now=now)
        started += len(tick.commands) if tick else 0
    return started


def rollout_tick(rollout_id: int, *, now: datetime | None = None) -> Tick | None:
    """One bounded step of one rollout; None when another driver holds it."""
    now = now or timezone.now()
    rollout = rollout_claim(rollout_id, now)
    if rollout is None:
        return None
    tick = Tick(rollout_id)
    try:
        with transaction.atomic():
            # The rollout's row first, then its targets: a pause or a cancel (which lock the
            # row, then touch targets) waits for the tick instead of deadlocking with it.
            mine = Rollout.objects.select_for_update().filter(
                pk=rollout.pk, version=rollout.version
            )
            if not mine.exists():
                raise LeaseLost(f"rollout {rollout.pk} moved before its tick")
            _step(rollout, tick, now)
            if not ledger_move_row(ROLLOUTS, rollout, sets=_released(rollout, now), now=now):
                raise LeaseLost(f"rollout {rollout.pk} moved during its tick")
    except LeaseLost:
        return Tick(rollout_id)
    if tick.commands:
        hand_on_commit(Committed(commands=tick.commands))
    return tick


def _released(rollout: Rollout, now: datetime) -> dict[str, object]:
    """The tick's end: the lease given back and the driver's position in the plan as the
    tick left it."""
    position = (
        "canary_left",
        "rate_per_minute",
        "rate_budget",
        "recent_starts",
        "ramp_next_applied",
        "ramping",
        "waves",
        "targets_through_endpoint",
    )
    return {"lease_expires_at": None, "ticked_at": now} | {
        name: getattr(rollout, name) for name in position
    }


def _step(rollout: Rollout, tick: Tick, now: datetime) -> None:
    windows = farm_windows(rollout, now)
    if rollout.status == RolloutStatus.SCHEDULED:
        if not windows.open:
            return
        rollout_move(rollout, RolloutStatus.RUNNING, reason="start time reached", now=now)
        tick.moved_to = RolloutStatus.RUNNING
    counts = rollout_count(rollout.pk)
    tripped = abort_tripped(rollout, counts)
    if tripped is not None:
        reason = "abort criterion tripped: {outcome} ≥ {threshold_pct}% of ≥ {min_finished}"
        rollout_move(
            rollout,
            RolloutStatus.ABORTED,
            reason=reason.format(**tripped["criterion"]),  # type: ignore[arg-type]
            now=now,
            tripped=tripped,
        )
        tick.skipped += unsent_stop(rollout, SkipReason.ABORTED, now)
        tick.moved_to = RolloutStatus.ABORTED
        return
    if windows.closed and counts[TargetStep.PENDING]:
        tick.skipped += unsent_stop(rollout, SkipReason.WINDOW_CLOSED, now, farm_ids=windows.closed)
    if rollout.end_local and len(windows.closed) == windows.farms:
        _window_end(rollout, tick, counts, now)
        return
    if rollout.mode == TargetMode.CONTINUOUS:
        _pick_up(rollout, now)
        counts = rollout_count(rollout.pk)
    pending = counts[TargetStep.PENDING]
    if not pending and not counts.live:
        if rollout.mode == TargetMode.SNAPSHOT:
            rollout_move(rollout, RolloutStatus.COMPLETED, reason="every target finished", now=now)
            tick.moved_to = RolloutStatus.COMPLETED
        return
    quota = _quota(rollout, counts, now)
    if quota and pending and windows.open:
        wave = wave_start(rollout, quota, windows.open, now)
        started = len(wave.commands)
        tick.commands, tick.skipped = wave.commands, tick.skipped + wave.skipped
        if rollout.ramping:
            rollout.rate_budget = max(0.0, rollout.rate_budget - started)
            if started:
                rollout.recent_starts.append([now.timestamp(), started])
        else:
            rollout.canary_left = max(0, rollout.canary_left - started)


def _quota(rollout: Rollout, counts: Counts, now: datetime) -> int:
    """How many targets this tick may start: the canary's rest, then the ramp's budget."""
    if not rollout.ramping:
        if counts[TargetStep.PENDING] == 0:
            rollout.canary_left = 0
        if rollout.canary_left:
            return rollout.canary_left
        if counts.live:
            return 0  # the canary is still on its way: the ramp waits for its outcome
        rollout.ramping = True
        rollout.ticked_at = now
    while counts["applied"] >= rollout.ramp_next_applied:
        rollout.rate_per_minute = min(
            rollout.rate_per_minute * rollout.increment_factor, rollout.max_rate_per_minute
        )
        rollout.ramp_next_applied += rollout.ramp_every_applied
    elapsed = (now - (rollout.ticked_at or now)).total_seconds()
    burst = max(1.0, rollout.rate_per_minute * settings.ROLLOUTS.burst_s / 60)
    rollout.rate_budget = min(
        rollout.rate_budget + rollout.rate_per_minute * max(0.0, elapsed) / 60, burst
    )
    since = now.timestamp() - 60
    rollout.recent_starts = [[at, n] for at, n in rollout.recent_starts if at > since]
    room = math.floor(rollout.rate_per_minute) - sum(n for _, n in rollout.recent_starts)
    return max(0, min(math.floor(rollout.rate_budget), room))


def _window_end(rollout: Rollout, tick: Tick, counts: Counts, now: datetime) -> None:
    """Every farm's window has closed: ``cancel`` ends the rollout now, ``stop`` once its
    sent commands have finished."""
    if rollout.end_behaviour == EndBehaviour.CANCEL:
        rollout_move(rollout, RolloutStatus.CANCELLED, reason="window closed", now=now)
        tick.moved_to = RolloutStatus.CANCELLED
    elif not counts.live:
        rollout_move(rollout, RolloutStatus.COMPLETED, reason="window closed", now=now)
        tick.moved_to = RolloutStatus.COMPLETED


def _pick_up(rollout: Rollout, now: datetime) -> None:
    """New endpoints matching the selector join a continuous rollout (bounded: those above
    the rollout's watermark, a batch at a time)."""
    fresh = list(
        selector_endpoints(rollout_selector(rollout)).filter(
            pk__gt=rollout.targets_through_endpoint
        )[: settings.ROLLOUTS.pick_up_batch]
    )
    if fresh:
        targets_insert(rollout, fresh, now)
        rollout.targets_through_endpoint = fresh[-1].pk
