"""The demo's farm-safety lane: a greenhouse sensor falls silent while the heater it switched
on is running. Nothing else would ever decide the heater again; the watchdog rule ("no
reading for a few seconds → heater off") puts it in its safe state and raises a critical
alarm, which notifies the farm's people and clears by itself once the sensor reports again.

The heater rule also carries a run-time limit (``max_on_s``): its follow-up is due long after
the demo, and is dropped then because the watchdog's command changed the heater first."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

from django.contrib.auth import get_user_model
from django.core.management.base import CommandError
from django.utils import timezone

from alarms.models import Alarm, AlarmStatus
from automation.models import AutomationRule, DeviceCommand
from automation.services.rules import rule_create
from automation.states import CommandOrigin, CommandStatus
from config.tables import format_table
from devices.models import (
    DeviceInstanceEndpoint,
    DeviceProfile,
    DeviceProfileEndpoint,
    Farm,
)
from devtools.demo import demo_device, demo_endpoint
from devtools.simulator import DeviceSimulator, SimulatedDevice
from notifications.models import Membership, MembershipRole, Notification

SENSOR, HEATER = "DEMO-P01", "DEMO-H01"  # a greenhouse probe and its heater
WATCHDOG_S = 4  # the sensor's silence that turns the heater off
REPORT_EVERY_S = 2  # the greenhouse sensor's profile: offline after three missed reports
MAX_ON_S = 600  # the heater rule's run-time limit
COLD, MILD = 15.0, 21.0
HEATER_RULE = "Greenhouse: heat when cold"
WATCHDOG_RULE = "Greenhouse: sensor silent, heater off"


@dataclass(frozen=True)
class SafetyLane:
    farm: Farm
    temp: DeviceInstanceEndpoint
    heat: DeviceInstanceEndpoint
    heater_rule: AutomationRule
    watchdog: AutomationRule


def safety_devices() -> list[SimulatedDevice]:
    """The greenhouse's sensor and heater, as the simulator runs them."""
    return [SimulatedDevice(SENSOR, {"temp": MILD}), SimulatedDevice(HEATER, {"heat": False})]


def _profiles(farm: Farm) -> tuple[DeviceProfile, DeviceProfile]:
    org = farm.organization
    sensor, _ = DeviceProfile.objects.update_or_create(
        organization=org,
        name="Probe v1",
        defaults={"expected_interval_s": REPORT_EVERY_S},
    )
    heater, _ = DeviceProfile.objects.get_or_create(organization=org, name="Heater v1")
    DeviceProfileEndpoint.objects.get_or_create(
        profile=sensor, key="temp", defaults={"data_type": "number", "unit": "°C"}
    )
    DeviceProfileEndpoint.objects.get_or_create(
        profile=heater,
        key="heat",
        defaults={
            "data_type": "bool",
            "writable": True,
            "rpc_method": "setHeat",
            "rpc_param_key": "heat",
            "safe_value": False,
        },
    )
    return sensor, heater


def _rule(farm: Farm, name: str) -> AutomationRule | None:
    return AutomationRule.objects.filter(farm=farm, name=name, deleted_at__isnull=True).first()


def safety_seed(farm: Farm) -> SafetyLane:
    """Idempotently: the greenhouse devices, the heater rule with its run-time limit, and the
    watchdog (a rule whose only condition is the sensor's silence, top priority by default)."""
    grower, _ = get_user_model()._default_manager.get_or_create(
        username="demo-grower", defaults={"email": "grower@demo.invalid"}
    )
    Membership.objects.get_or_create(user=grower, farm=farm, role=MembershipRole.MEMBER)
    sensor_profile, heater_profile = _profiles(farm)
    demo_device(SENSOR, farm, sensor_profile)
    demo_device(HEATER, farm, heater_profile)
    temp, heat = demo_endpoint(SENSOR, "temp"), demo_endpoint(HEATER, "heat")
    heater_rule = _rule(farm, HEATER_RULE) or rule_create(
        farm=farm,
        name=HEATER_RULE,
        trigger_endpoint=temp,
        operator="lt",
        threshold_value=18,
        target_endpoint=heat,
        target_value=True,
        max_on_s=MAX_ON_S,
    )
    watchdog = _rule(farm, WATCHDOG_RULE) or rule_create(
        farm=farm,
        name=WATCHDOG_RULE,
        trigger_endpoint=temp,
        operator="silent_for",
        threshold_value=WATCHDOG_S,
        target_endpoint=heat,
        target_value=False,
        alarm_severity="critical",
    )
    return SafetyLane(farm, temp, heat, heater_rule, watchdog)


def safety_cold_then_silent(sim: DeviceSimulator) -> datetime:
    """One cold reading (the heater goes on); then the sensor says nothing more. When."""
    at = timezone.now()
    sim.publish_telemetry(SENSOR, {"temp": COLD}, ts=at)
    return at


def safety_sensor_back(sim: DeviceSimulator) -> None:
    sim.publish_telemetry(SENSOR, {"temp": MILD}, ts=timezone.now())


def _watchdog_commands(lane: SafetyLane, since: datetime) -> list[DeviceCommand]:
    return list(
        DeviceCommand.objects.filter(
            target_device_endpoint=lane.heat, origin=CommandOrigin.WATCHDOG, created_at__gte=since
        )
    )


def _alarms(lane: SafetyLane, since: datetime) -> list[Alarm]:
    return list(
        Alarm.objects.filter(farm=lane.farm, last_raised_at__gte=since).order_by("first_raised_at")
    )


def safety_wait(
    what: str,
    done: Callable[[], bool],
    timeout_s: float,
    progress: Callable[[str], None],
) -> None:
    deadline = time.monotonic() + timeout_s
    while not done():
        if time.monotonic() > deadline:
            raise CommandError(f"the safety lane: {what} did not happen within {timeout_s:.0f}s")
        progress(f"safety lane: waiting until {what}")
        time.sleep(0.25)


def _watchdog_alarms(lane: SafetyLane, silent_from: datetime) -> list[Alarm]:
    return [
        a
        for a in _alarms(lane, silent_from)
        if a.source_id == lane.watchdog.pk and a.first_raised_at >= silent_from
    ]


def safety_heater_safe(lane: SafetyLane, silent_from: datetime) -> bool:
    """Since the sensor fell silent: the watchdog's command to the heater is applied and its
    alarm is open."""
    applied = any(c.status == CommandStatus.APPLIED for c in _watchdog_commands(lane, silent_from))
    return applied and any(
        a.status != AlarmStatus.CLEARED for a in _watchdog_alarms(lane, silent_from)
    )


def safety_alarm_cleared(lane: SafetyLane, silent_from: datetime) -> bool:
    return any(a.status == AlarmStatus.CLEARED for a in _watchdog_alarms(lane, silent_from))


def _seconds(at: datetime | None, since: datetime) -> str:
    return "-" if at is None else f"{(at - since).total_seconds():.1f}"


def safety_summary(
    lane: SafetyLane, since: datetime, silent_from: datetime
) -> tuple[list[tuple[str, str]], list[tuple[str, bool]]]:
    """The heater's commands and the alarms as tables, and the lane's invariants."""
    commands = list(
        DeviceCommand.objects.filter(
            target_device_endpoint=lane.heat, created_at__gte=since
        ).order_by("pk")
    )
    heater = format_table(
        ["command", "origin", "value", "state", "applied s after the last reading"],
        [
            (c.pk, c.origin, "on" if c.target_value else "off", c.status,
             _seconds(c.applied_at, silent_from))
            for c in commands
        ],
    )  # fmt: skip
    alarms = _alarms(lane, since)
    notified = Counter(
        int(key.split(":")[1])
        for key in Notification.objects.filter(
            farm=lane.farm, source_key__startswith="alarm:", created_at__gte=since
        ).values_list("source_key", flat=True)
    )
    groups: dict[tuple[str, str, str, str], list[Alarm]] = {}
    for a in alarms:
        groups.setdefault((a.type, a.severity, a.status, a.cleared_by or "-"), []).append(a)
    table = format_table(
        ["type", "severity", "status", "cleared by", "alarms", "raised", "notifications"],
        [
            (*key, len(group), sum(a.count for a in group), sum(notified[a.pk] for a in group))
            for key, group in sorted(groups.items())
        ],
    )
    watchdog = _watchdog_commands(lane, silent_from)
    last = commands[-1] if commands else None
    watchdog_alarms = _watchdog_alarms(lane, silent_from)
    checks = [
        (
            "the silent sensor's heater ended off, by one watchdog command",
            len(watchdog) == 1
            and last is not None
            and last.origin == CommandOrigin.WATCHDOG
            and last.status == CommandStatus.APPLIED,
        ),
        (
            "one watchdog alarm, notified, cleared when the sensor came back",
            len(watchdog_alarms) == 1
            and notified[watchdog_alarms[0].pk] > 0
            and watchdog_alarms[0].status == AlarmStatus.CLEARED,
        ),
    ]
    tables = [
        (f"Farm safety: the greenhouse heater after its sensor fell silent "
         f"(watchdog {WATCHDOG_S} s, run-time limit {MAX_ON_S} s)", heater),
        ("Alarms of this run (a command that ended failed, expired or uncertain raises one)",
         table),
    ]  # fmt: skip
    return tables, checks
