"""What ``make up`` needs before its simulator's devices mean anything: an organisation, an
operator who can log in, farms, one device per simulated serial and rules that the
simulator's swinging temperature keeps crossing. Idempotent, so a second run adds only what
is missing; secrets are made only for a user created now and shown once."""

from __future__ import annotations

import secrets
from dataclasses import dataclass, field

from django.contrib.auth import get_user_model
from django.db import transaction

from automation.models import AutomationRule
from automation.services.rules import rule_create
from common.accounts.services import api_token_issue
from common.models import MemberRole, Organization, OrganizationMember
from devices.models import (
    Device,
    DeviceInstanceEndpoint,
    DeviceProfile,
    DeviceProfileEndpoint,
    Farm,
)
from devices.services import device_create

ORGANIZATION = "Demo Co-op"
OPERATOR = "operator"
PROFILE = "Simulated controller v1"
# Vent on above, off below: the simulator's wave (make up: 16..34) crosses both each period.
VENT_ON_ABOVE, VENT_OFF_BELOW = 28.0, 22.0


@dataclass
class Provisioned:
    """What this run created; the password and token are set only for a new operator."""

    farms: int = 0
    devices: int = 0
    rules: int = 0
    password: str | None = None
    token: str | None = None
    serials: list[str] = field(default_factory=list)


def simulator_serials(prefix: str, count: int) -> list[str]:
    """The serials ``manage.py device_simulator --prefix P --devices N`` runs."""
    return [f"{prefix}-{i:04d}" for i in range(1, count + 1)]


def _profile(
    org: Organization,
) -> tuple[DeviceProfile, DeviceProfileEndpoint, DeviceProfileEndpoint]:
    """The simulated controller's profile, the demo organisation's own."""
    profile, _ = DeviceProfile.objects.get_or_create(organization=org, name=PROFILE)
    temp, _ = DeviceProfileEndpoint.objects.get_or_create(
        profile=profile, key="temp", defaults={"data_type": "number"}
    )
    io1, _ = DeviceProfileEndpoint.objects.get_or_create(
        profile=profile,
        key="io1",
        defaults={
            "data_type": "bool",
            "writable": True,
            "rpc_method": "setIO",
            "rpc_param_key": "io1",
        },
    )
    return profile, temp, io1


def _operator(org: Organization, out: Provisioned) -> None:
    users = get_user_model()._default_manager
    user = users.filter(username=OPERATOR).first()
    if user is None:
        out.password = secrets.token_urlsafe(12)
        user = users.create_superuser(username=OPERATOR, email="", password=out.password)
        out.token = api_token_issue(user=user).key
    OrganizationMember.objects.get_or_create(
        user=user, organization=org, defaults={"role": MemberRole.ADMIN}
    )


def _rules(
    farm: Farm, device: Device, temp: DeviceInstanceEndpoint, io1: DeviceInstanceEndpoint
) -> int:
    made = 0
    for name, operator, threshold, value in [
        (f"{device.serial_number} vent on", "gt", VENT_ON_ABOVE, True),
        (f"{device.serial_number} vent off", "lt", VENT_OFF_BELOW, False),
    ]:
        if not AutomationRule.objects.filter(farm=farm, name=name).exists():
            rule_create(
                farm=farm,
                name=name,
                trigger_endpoint=temp,
                operator=operator,
                threshold_value=threshold,
                target_endpoint=io1,
                target_value=value,
            )
            made += 1
    return made


def provision_demo(
    *, farms: int, serials: list[str], time_zone: str = "Europe/Berlin"
) -> Provisioned:
    """The serials are dealt to the farms in turn; each device gets a vent-on and a vent-off
    rule from its temperature to its own relay."""
    out = Provisioned(serials=serials)
    with transaction.atomic():
        org, _ = Organization.objects.get_or_create(name=ORGANIZATION)
        _operator(org, out)
        profile, temp_ep, io1_ep = _profile(org)
        farm_rows = []
        for i in range(1, farms + 1):
            farm, created = Farm.objects.get_or_create(
                organization=org, name=f"Farm {i}", defaults={"time_zone": time_zone}
            )
            out.farms += created
            farm_rows.append(farm)
        for index, serial in enumerate(serials):
            farm = farm_rows[index % len(farm_rows)]
            device = Device.objects.filter(serial_number=serial).first()
            if device is None:
                device = device_create(farm=farm, profile=profile, serial_number=serial)
                out.devices += 1
            endpoints = {
                e.profile_endpoint_id: e
                for e in DeviceInstanceEndpoint.objects.filter(device=device)
            }
            if temp_ep.pk in endpoints and io1_ep.pk in endpoints:
                out.rules += _rules(
                    device.farm, device, endpoints[temp_ep.pk], endpoints[io1_ep.pk]
                )
    return out
