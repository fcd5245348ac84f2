"""The rollout bench's fleet and plan: farms of relays (one writable io1 endpoint each) under
one tagged organisation, deleted with everything derived from them; a rollout over one or
more of its farms with a canary of one and the largest rate the plan allows; and the steps
that put the rollout in its ramp, so each timed tick is the steady state's wave."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from django.contrib.auth.models import AnonymousUser
from django.db import transaction

from automation.models import CommandTransition, DeviceCommand
from automation.services.transitions import GuardedTransition, Transition, guarded_transitions_apply
from automation.states import CommandStatus, ReasonCode
from common.models import Organization
from devices.models import Device, DeviceInstanceEndpoint, Farm
from devtools.bench import BenchError
from devtools.bench.fleet import RELAY_KEY, BenchFleet, fleet_delete, relay_profile
from rollouts import models as plan_bounds
from rollouts.models import Rollout
from rollouts.services.drive import rollout_tick
from rollouts.services.plan import RolloutSpec, rollout_create

TICK_EVERY = timedelta(seconds=61)  # injected between ticks: the last minute's starts age out


@dataclass
class RelayFleet:
    fleet: BenchFleet
    profile_id: int
    farm_ids: list[int]


@contextmanager
def relay_fleet(tag: str, farm_sizes: Sequence[int]) -> Iterator[RelayFleet]:
    """Farms of ``farm_sizes`` online relays; on the way out the rollouts over them, their
    commands and the fleet are deleted."""
    relays = relay_fleet_seed(tag, farm_sizes)
    try:
        yield relays
    finally:
        rollouts_delete(relays.fleet.organization_id)
        fleet_delete(relays.fleet)


def relay_fleet_seed(tag: str, farm_sizes: Sequence[int]) -> RelayFleet:
    now = datetime.now(UTC)  # online: a wave's gates pass
    with transaction.atomic():
        org = Organization.objects.create(name=f"bench-{tag}")
        fleet = BenchFleet(tag=tag, organization_id=org.pk)
        farms = Farm.objects.bulk_create(
            [Farm(organization=org, name=f"bench-{i}") for i in range(len(farm_sizes))]
        )
        profile, endpoint = relay_profile(fleet)
        devices = [
            Device(
                farm=farm,
                profile=profile,
                serial_number=f"{fleet.serial_prefix}F{f}R{n}",
                last_seen_at=now,
            )
            for f, (farm, size) in enumerate(zip(farms, farm_sizes, strict=True))
            for n in range(size)
        ]
        Device.objects.bulk_create(devices, batch_size=2000)
        DeviceInstanceEndpoint.objects.bulk_create(
            [DeviceInstanceEndpoint(device=d, profile_endpoint=endpoint) for d in devices],
            batch_size=2000,
        )
        fleet.relays = [d.serial_number for d in devices]
    return RelayFleet(fleet, profile.pk, [f.pk for f in farms])


def rollouts_delete(organization_id: int) -> None:
    """The organisation's rollouts (their targets and timeline cascade) and their commands."""
    rollouts = Rollout.objects.filter(organization_id=organization_id)
    keys = [f"rollout:{pk}:" for pk in rollouts.values_list("pk", flat=True)]
    rollouts.delete()
    for prefix in keys:
        commands = DeviceCommand.objects.filter(idempotency_key__startswith=prefix)
        CommandTransition.objects.filter(command__in=commands).delete()
        commands.delete()


def rollout_ramping(relays: RelayFleet, farm_ids: Sequence[int], now: datetime) -> Rollout:
    """A rollout over ``farm_ids`` past its canary of one (applied), its ramp started: the
    next tick (``TICK_EVERY`` later) starts a wave as large as the farms' room allows."""
    spec = RolloutSpec(
        name=f"bench {relays.fleet.tag}",
        farm_ids=list(farm_ids),
        profile_id=relays.profile_id,
        endpoint_key=RELAY_KEY,
        value=True,
        reason="bench: the driver's wave",
        canary_size=1,
        base_rate_per_minute=plan_bounds.RATE_MAX,
        max_rate_per_minute=plan_bounds.RATE_MAX,
        ramp_every_applied=plan_bounds.RAMP_EVERY_MAX,
        max_live_per_farm=plan_bounds.LIVE_PER_FARM_MAX,
    )
    rollout = rollout_create(
        organization=Organization.objects.get(pk=relays.fleet.organization_id),
        actor=AnonymousUser(),  # no user row to leave behind
        spec=spec,
        now=now,
    )
    canary = rollout_tick(rollout.pk, now=now)
    if canary is None or len(canary.commands) != 1:
        raise BenchError(f"rollout bench: the canary of rollout {rollout.pk} did not start")
    _applied(canary.commands, now)
    ramp = rollout_tick(rollout.pk, now=now + timedelta(seconds=1))  # the ramp starts here
    if ramp is None or ramp.commands:
        raise BenchError(f"rollout bench: rollout {rollout.pk} did not enter its ramp")
    rollout.refresh_from_db()
    return rollout


def _applied(command_ids: Sequence[int], now: datetime) -> None:
    """The canary's command applied, as the pipeline moves it (each edge audited)."""
    for to, reason in (
        (CommandStatus.DISPATCHED, ReasonCode.DISPATCHED),
        (CommandStatus.APPLIED, ReasonCode.STATE_REPORTED),
    ):
        rows = list(DeviceCommand.objects.filter(pk__in=list(command_ids)))
        guarded_transitions_apply(
            [GuardedTransition(c, [Transition(to, reason, "bench device")]) for c in rows],
            now=now,
        )
