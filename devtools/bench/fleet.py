"""The devices a bench run measures with: one organisation per run, tagged, so everything it
creates (and everything the pipeline derives from its telemetry) is found by that tag and
deleted afterwards, leaving a database shared with real data as it was."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime

from django.db import connection, transaction

from alarms.models import Alarm
from automation.models import AutomationEndpointEvent, AutomationRule, AutomationRuleExecution
from common.models import Organization
from devices.models import (
    Device,
    DeviceInstanceEndpoint,
    DeviceMessageRejection,
    DeviceProfile,
    DeviceProfileEndpoint,
    EndpointDataType,
    Farm,
    Telemetry,
)

SENSOR_KEYS = ("temp", "humidity", "soil", "light")
RELAY_KEY = "io1"
# The command path's two rules per farm: readings alternate across both thresholds, so each
# reading asks for the opposite relay state and makes exactly one command.
HOT_C, COLD_C = 30, 18
# A running fleet stays online because its devices report; the bench's devices speak only
# when a step offers them a crossing, minutes apart. An hourly reporting interval keeps the
# sweep from moving them offline between crossings, so a crossing is charged with its own
# work and not with a device coming back (``devtools.bench.distributed.warmup``).
REPORT_INTERVAL_S = 3600


@dataclass
class BenchFleet:
    """Serials of a run's devices; ``relays[i]`` is driven by ``sensors[i]``'s rules (empty
    for an ingest fleet, whose sensors share one farm and have no rules)."""

    tag: str
    organization_id: int
    sensors: list[str] = field(default_factory=list)
    relays: list[str] = field(default_factory=list)

    @property
    def serial_prefix(self) -> str:
        return f"BENCH-{self.tag}-"


@contextmanager
def fleet_seeded(
    *, tag: str, farms: int, sensors_per_farm: int, relays: bool
) -> Iterator[BenchFleet]:
    """``fleet_seed``, and ``fleet_delete`` on the way out. Enter it outside the pipeline
    (or on an exit stack that is): deleting while a worker still writes the fleet's readings
    would race it."""
    fleet = fleet_seed(tag=tag, farms=farms, sensors_per_farm=sensors_per_farm, relays=relays)
    try:
        yield fleet
    finally:
        fleet_delete(fleet)


Specs = list[tuple[Device, DeviceProfileEndpoint]]  # (device, endpoint) instances to create


def fleet_seed(*, tag: str, farms: int, sensors_per_farm: int, relays: bool) -> BenchFleet:
    """Seed ``farms`` farms of ``sensors_per_farm`` sensors each (endpoints: SENSOR_KEYS);
    with ``relays``, one online relay per farm and a hot→on / cold→off rule pair on it."""
    with transaction.atomic():
        org = Organization.objects.create(name=f"bench-{tag}")
        fleet = BenchFleet(tag=tag, organization_id=org.pk)
        farm_rows = Farm.objects.bulk_create(
            [Farm(organization=org, name=f"bench-{i}") for i in range(farms)]
        )
        specs = _sensors(fleet, farm_rows, sensors_per_farm)
        if relays:
            specs += _relays(fleet, farm_rows)
        Device.objects.bulk_create(list({id(d): d for d, _ in specs}.values()))
        instances = DeviceInstanceEndpoint.objects.bulk_create(
            [DeviceInstanceEndpoint(device=d, profile_endpoint=e) for d, e in specs]
        )
        if relays:
            _rules_seed(fleet, farm_rows, instances, sensors_per_farm)
    return fleet


def _sensors(fleet: BenchFleet, farms: list[Farm], per_farm: int) -> Specs:
    profile = DeviceProfile.objects.create(
        organization_id=fleet.organization_id,
        name=f"bench-{fleet.tag}-sensor",
        expected_interval_s=REPORT_INTERVAL_S,
    )
    endpoints = DeviceProfileEndpoint.objects.bulk_create(
        [DeviceProfileEndpoint(profile=profile, key=k, data_type="number") for k in SENSOR_KEYS]
    )
    fleet.sensors = [f"{fleet.serial_prefix}S{i}" for i in range(len(farms) * per_farm)]
    devices = [
        Device(farm=farms[i // per_farm], profile=profile, serial_number=serial)
        for i, serial in enumerate(fleet.sensors)
    ]
    return [(d, e) for d in devices for e in endpoints]


def relay_profile(fleet: BenchFleet) -> tuple[DeviceProfile, DeviceProfileEndpoint]:
    """The fleet's relay profile and its one writable bool endpoint (RELAY_KEY)."""
    profile = DeviceProfile.objects.create(
        organization_id=fleet.organization_id,
        name=f"bench-{fleet.tag}-relay",
        expected_interval_s=REPORT_INTERVAL_S,
    )
    endpoint = DeviceProfileEndpoint.objects.create(
        profile=profile,
        key=RELAY_KEY,
        data_type=EndpointDataType.BOOL,
        writable=True,
        rpc_method="setIO",
        rpc_param_key=RELAY_KEY,
    )
    return profile, endpoint


def _relays(fleet: BenchFleet, farms: list[Farm]) -> Specs:
    profile, endpoint = relay_profile(fleet)
    fleet.relays = [f"{fleet.serial_prefix}R{i}" for i in range(len(farms))]
    now = datetime.now(UTC)  # online: dispatch's freshness gate passes
    return [
        (Device(farm=farm, profile=profile, serial_number=serial, last_seen_at=now), endpoint)
        for farm, serial in zip(farms, fleet.relays, strict=True)
    ]


def _rules_seed(
    fleet: BenchFleet, farms: list[Farm], instances: list[DeviceInstanceEndpoint], per_farm: int
) -> None:
    by_key = {(i.device.serial_number, i.profile_endpoint.key): i for i in instances}
    rules = [
        AutomationRule(
            farm=farm,
            name=f"bench {operator} {threshold}",
            trigger_endpoint=by_key[(fleet.sensors[n * per_farm], "temp")],
            operator=operator,
            threshold_value=threshold,
            target_endpoint=by_key[(fleet.relays[n], RELAY_KEY)],
            target_value=value,
        )
        for n, farm in enumerate(farms)
        for operator, threshold, value in (("gt", HOT_C, True), ("lt", COLD_C, False))
    ]
    AutomationRule.objects.bulk_create(rules)


def fleet_readings_delete(fleet: BenchFleet) -> None:
    """Delete what the pipeline derived from the fleet (commands and their audit, events,
    telemetry, rejections), keeping the devices: the next measurement starts empty. The two
    large tables go by plain DELETE; the ORM would load every row to cascade."""
    farms = Farm.objects.filter(organization_id=fleet.organization_id)
    AutomationRuleExecution.objects.filter(rule__farm__in=farms).delete()  # + commands, audit
    events = AutomationEndpointEvent._meta.db_table
    telemetry = Telemetry._meta.db_table
    farm_ids = f"SELECT id FROM {Farm._meta.db_table} WHERE organization_id = %s"
    device_ids = f"SELECT id FROM {Device._meta.db_table} WHERE farm_id IN ({farm_ids})"
    endpoint_ids = (
        f"SELECT id FROM {DeviceInstanceEndpoint._meta.db_table} WHERE device_id IN ({device_ids})"
    )
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(
            f"DELETE FROM {events} WHERE device_instance_endpoint_id IN ({endpoint_ids})",
            [fleet.organization_id],
        )
        cursor.execute(
            f"DELETE FROM {telemetry} WHERE device_id IN ({device_ids})", [fleet.organization_id]
        )
    DeviceMessageRejection.objects.filter(serial_number__startswith=fleet.serial_prefix).delete()


def fleet_delete(fleet: BenchFleet) -> None:
    """Delete the fleet and everything derived from it."""
    fleet_readings_delete(fleet)
    # A run that overloads the stack leaves commands uncertain, and each one an alarm that
    # holds its farm (a protected key): they go first.
    Alarm.objects.filter(organization_id=fleet.organization_id).delete()
    farms = Farm.objects.filter(organization_id=fleet.organization_id)
    AutomationRule.objects.filter(farm__in=farms).delete()
    Device.objects.filter(farm__in=farms).delete()
    DeviceProfile.objects.filter(organization_id=fleet.organization_id).delete()
    farms.delete()
    Organization.objects.filter(pk=fleet.organization_id).delete()
