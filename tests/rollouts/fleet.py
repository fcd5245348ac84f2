"""A fleet to roll out to: farms of relays on one profile, and helpers that play the devices
by moving commands along the ledger's own guarded transitions."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.contrib.auth.models import User

from automation.models import DeviceCommand
from automation.services.transitions import GuardedTransition, Transition, guarded_transitions_apply
from automation.states import CommandStatus, ReasonCode
from common.models import Organization
from devices.models import (
    Device,
    DeviceInstanceEndpoint,
    DeviceProfile,
    DeviceProfileEndpoint,
    EndpointDataType,
    Farm,
)
from rollouts.models import Rollout
from rollouts.services.plan import RolloutSpec, rollout_create
from tests.common.factories import OrganizationFactory
from tests.devices.factories import DeviceFactory, DeviceProfileFactory, FarmFactory


@dataclass
class Fleet:
    organization: Organization
    profile: DeviceProfile
    vent: DeviceProfileEndpoint
    farms: list[Farm]
    devices: list[Device] = field(default_factory=list)

    def endpoints(self) -> list[DeviceInstanceEndpoint]:
        return list(
            DeviceInstanceEndpoint.objects.filter(
                device__in=self.devices, profile_endpoint=self.vent
            ).order_by("pk")
        )

    def add_device(self, farm: Farm, serial: str) -> Device:
        device = DeviceFactory(farm=farm, profile=self.profile, serial_number=serial)
        self.devices.append(device)
        return device

    def spec(self, **overrides: Any) -> RolloutSpec:
        values: dict[str, Any] = {
            "name": "close vents before the storm",
            "farm_ids": [f.pk for f in self.farms],
            "profile_id": self.profile.pk,
            "endpoint_key": "vent",
            "value": False,
            "reason": "storm warning",
            "canary_size": 2,
            "base_rate_per_minute": 6.0,
            "increment_factor": 2.0,
            "ramp_every_applied": 4,
            "max_rate_per_minute": 60.0,
            "max_live_per_farm": 100,
        }
        values.update(overrides)
        return RolloutSpec(**values)

    def rollout(self, user: User, now: datetime | None = None, **overrides: Any) -> Rollout:
        return rollout_create(
            organization=self.organization, actor=user, spec=self.spec(**overrides), now=now
        )


def make_fleet(farms: int = 1, per_farm: int = 10, time_zone: str = "Europe/Berlin") -> Fleet:
    organization = OrganizationFactory()
    profile = DeviceProfileFactory(organization=organization, name="vent controller")
    vent = DeviceProfileEndpoint.objects.create(
        profile=profile,
        key="vent",
        data_type=EndpointDataType.BOOL,
        writable=True,
        rpc_method="setIO",
        rpc_param_key="vent",
    )
    fleet = Fleet(
        organization,
        profile,
        vent,
        [FarmFactory(organization=organization, time_zone=time_zone) for _ in range(farms)],
    )
    for f, farm in enumerate(fleet.farms):
        for n in range(per_farm):
            fleet.add_device(farm, f"VENT-{organization.pk}-{f}-{n:04d}")
    return fleet


# The edges a device's answers take a command along, by the end it reaches.
_PATHS: dict[str, list[tuple[CommandStatus, ReasonCode]]] = {
    CommandStatus.APPLIED: [
        (CommandStatus.DISPATCHED, ReasonCode.DISPATCHED),
        (CommandStatus.APPLIED, ReasonCode.STATE_REPORTED),
    ],
    CommandStatus.FAILED: [
        (CommandStatus.DISPATCHED, ReasonCode.DISPATCHED),
        (CommandStatus.FAILED, ReasonCode.HARDWARE_FAULT),
    ],
    CommandStatus.UNCERTAIN: [
        (CommandStatus.DISPATCHED, ReasonCode.DISPATCHED),
        (CommandStatus.UNCERTAIN, ReasonCode.NO_APPLIED_EVIDENCE),
    ],
    CommandStatus.EXPIRED: [(CommandStatus.EXPIRED, ReasonCode.RETRY_BUDGET_EXHAUSTED)],
    CommandStatus.DISPATCHED: [(CommandStatus.DISPATCHED, ReasonCode.DISPATCHED)],
}


def finish(commands: Sequence[int], status: str, now: datetime) -> None:
    """Move ``commands`` to ``status`` as the pipeline would, each edge guarded and audited."""
    for to, reason in _PATHS[status]:
        rows = list(DeviceCommand.objects.filter(pk__in=list(commands)))
        guarded_transitions_apply(
            [GuardedTransition(c, [Transition(to, reason, "test device")]) for c in rows],
            now=now,
        )


def sent_commands(rollout: Rollout, status: str | None = None) -> list[int]:
    rows = DeviceCommand.objects.filter(rollout_target__rollout=rollout)
    if status is not None:
        rows = rows.filter(status=status)
    return list(rows.order_by("pk").values_list("pk", flat=True))
