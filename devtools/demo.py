"""The demo farm: sensor/relay pairs with rules, and one simulator fault mode per relay so
the demo shows every path of the command state machine."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

from django.utils import timezone

from automation.models import AutomationRule, AutomationRuleSchedule
from automation.services.rule_schedules import rule_schedules_ensure
from common.models import Organization
from devices.models import (
    Device,
    DeviceInstanceEndpoint,
    DeviceProfile,
    DeviceProfileEndpoint,
    Farm,
)
from devices.services import device_create, device_endpoints_sync
from devtools.provisioning import ORGANIZATION
from devtools.simulator import FaultMode

DEMO_FARM = "Demo farm"  # in ORGANIZATION, which ``make up``'s farms share

DEMO_FAULTS: list[dict[str, Any]] = [
    {},
    {"fault": FaultMode.DROP_ACK, "fault_times": 1},
    {"fault": FaultMode.REJECT, "reject_code": "busy", "fault_times": 1},
    {"fault": FaultMode.DUPLICATE_ACK},
    {"fault": FaultMode.DELAY_ACK, "delay_s": 0.4},
    {"fault": FaultMode.NEVER_APPLY},
    {"fault": FaultMode.WRONG_VALUE},
    {"fault": FaultMode.REJECT, "reject_code": "invalid_param"},
]


def _profiles(
    org: Organization,
) -> tuple[DeviceProfile, DeviceProfile, dict[str, DeviceProfileEndpoint]]:
    """The demo's sensor and relay profiles, the demo organisation's own."""
    specs: list[tuple[DeviceProfile, str, dict[str, Any]]]
    sensor, _ = DeviceProfile.objects.get_or_create(organization=org, name="Climate sensor v1")
    relay, _ = DeviceProfile.objects.get_or_create(organization=org, name="Relay box v1")
    specs = [
        (sensor, "temp", {"data_type": "number", "unit": "°C"}),
        (sensor, "humidity", {"data_type": "number", "unit": "%"}),
        (
            relay,
            "io1",
            {"data_type": "bool", "writable": True, "rpc_method": "setIO", "rpc_param_key": "io1"},
        ),
        (
            relay,
            "fan",
            {
                "data_type": "number",
                "writable": True,
                "min_value": 0,
                "max_value": 100,
                "rpc_method": "setFan",
                "rpc_param_key": "fan",
                "unit": "%",
            },
        ),
    ]
    endpoints = {
        key: DeviceProfileEndpoint.objects.get_or_create(profile=p, key=key, defaults=d)[0]
        for p, key, d in specs
    }
    return sensor, relay, endpoints


def demo_device(serial: str, farm: Farm, profile: DeviceProfile) -> Device:
    """The demo device with its profile's endpoints (added too to one an older demo seeded)."""
    device = Device.objects.filter(serial_number=serial).first()
    if device is None:
        return device_create(farm=farm, profile=profile, serial_number=serial)
    device_endpoints_sync(device=device)
    return device


def demo_endpoint(serial: str, key: str) -> DeviceInstanceEndpoint:
    """A demo device's endpoint by serial and key, with its device and farm."""
    return DeviceInstanceEndpoint.objects.select_related("device__farm").get(
        device__serial_number=serial, profile_endpoint__key=key
    )


def seed_demo_farm(pairs: int) -> list[tuple[str, str, dict[str, Any]]]:
    """Idempotently create ``pairs`` (sensor, relay) pairs with a vent-on and a vent-off rule;
    returns (sensor serial, relay serial, simulator fault options) per pair."""
    org, _ = Organization.objects.get_or_create(name=ORGANIZATION)
    farm, _ = Farm.objects.get_or_create(
        organization=org, name=DEMO_FARM, defaults={"time_zone": "Europe/Berlin"}
    )
    sensor_profile, relay_profile, ep = _profiles(org)
    out = []
    for i in range(1, pairs + 1):
        sensor = demo_device(f"DEMO-S{i:02d}", farm, sensor_profile)
        relay = demo_device(f"DEMO-R{i:02d}", farm, relay_profile)
        temp = DeviceInstanceEndpoint.objects.get(device=sensor, profile_endpoint=ep["temp"])
        io1 = DeviceInstanceEndpoint.objects.get(device=relay, profile_endpoint=ep["io1"])
        for name, operator, threshold, value in [
            (f"Vent on {i}", "gt", 30, True),
            (f"Vent off {i}", "lt", 18, False),
        ]:
            AutomationRule.objects.get_or_create(
                farm=farm,
                name=name,
                defaults={
                    "trigger_endpoint": temp,
                    "operator": operator,
                    "threshold_value": threshold,
                    "target_endpoint": io1,
                    "target_value": value,
                },
            )
        out.append(
            (sensor.serial_number, relay.serial_number, DEMO_FAULTS[(i - 1) % len(DEMO_FAULTS)])
        )
    return out


def schedule_demo_occurrence(
    relay_serial: str, *, lead_s: float
) -> tuple[AutomationRule, datetime]:
    """A schedule-only rule "vent off at <time>" on the relay's io1, its one schedule moved to
    the next whole second ``lead_s`` from now (local to the farm) and its rows ensured at once,
    so the demo need not wait for beat; the rule and the occurrence's instant (UTC)."""
    io1 = demo_endpoint(relay_serial, "io1")
    farm = io1.device.farm
    rule, _ = AutomationRule.objects.get_or_create(
        farm=farm,
        name=f"Vent off by schedule {relay_serial}",
        defaults={"target_endpoint": io1, "target_value": False},
    )
    now = timezone.now()
    at = (now + timedelta(seconds=lead_s + 1)).replace(microsecond=0)
    local = at.astimezone(ZoneInfo(farm.time_zone)).time().replace(tzinfo=None)
    rule.schedules.all().delete()  # an earlier run's time: its rows deactivate when due
    AutomationRuleSchedule.objects.create(rule=rule, local_time=local, max_lateness_s=300)
    rule_schedules_ensure(rule_ids=[rule.pk], now=now)
    return rule, at
