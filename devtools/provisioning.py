"""What ``make up`` needs before its simulator's devices mean anything: an organisation, an
operator who can log in, farms, one device per simulated serial and rules that the
simulator's swinging temperature keeps crossing. Idempotent, so a second run adds only what
is missing; secrets are made only for a user created (or reset) now and shown once. The
demo's admin login (``manage.py demo_admin``) is made by the same ``demo_login_ensure``."""

from __future__ import annotations

import secrets
from dataclasses import dataclass, field

from django.contrib.auth import get_user_model
from django.contrib.auth.models import AbstractUser, Group
from django.db import transaction

from automation.models import AutomationRule
from automation.services.rules import rule_create
from common.accounts.services import api_token_issue
from common.members.services import member_role_change
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
        profile=profile, key="temp", defaults={"data_type": "number", "unit": "°C"}
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


@dataclass(frozen=True)
class DemoLogin:
    """A login to the demo organisation; ``password`` is set only when it was made or reset
    by this call (it is stored hashed, so nothing can show it again)."""

    user: AbstractUser
    password: str | None


def demo_login_ensure(
    *, organization: Organization, username: str, superuser: bool = False, reset: bool = False
) -> DemoLogin:
    """A login that administers ``organization``: a superuser (``make up``'s operator: every
    organisation), or a staff user in the admin's ``admin`` group whose role is admin in
    ``organization`` alone, so the scoped admin lists that organisation's rows only. Made with
    a random password when missing; ``reset`` gives an existing one a new password."""
    users = get_user_model()._default_manager
    with transaction.atomic():
        user = users.filter(username=username).first()
        password = secrets.token_urlsafe(12) if user is None or reset else None
        if user is None and superuser:
            user = users.create_superuser(username=username, email="", password=password)
        elif user is None:
            user = users.create_user(username=username, email="", password=password)
        elif password is not None:
            user.set_password(password)
            user.save(update_fields=["password"])
        if not superuser and not (user.is_staff and user.is_active):
            user.is_staff = user.is_active = True
            user.save(update_fields=["is_staff", "is_active"])
        if not superuser:  # the staff group common's migrations made, one per role
            user.groups.add(Group.objects.get(name=MemberRole.ADMIN))
        member, _ = OrganizationMember.objects.get_or_create(
            user=user, organization=organization, defaults={"role": MemberRole.ADMIN}
        )
        if member.role != MemberRole.ADMIN:
            member_role_change(member=member, role=MemberRole.ADMIN, by_superuser=True)
    return DemoLogin(user=user, password=password)


def _operator(org: Organization, out: Provisioned) -> None:
    login = demo_login_ensure(organization=org, username=OPERATOR, superuser=True)
    if login.password is not None:
        out.password = login.password
        out.token = api_token_issue(user=login.user).key


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
