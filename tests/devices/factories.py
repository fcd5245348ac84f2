"""factory_boy factories for the devices app's models, and a ready-made farm for tests and the
demo's shape."""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import factory
from django.utils import timezone

from automation.models import AutomationEndpointEvent, AutomationRule
from devices.models import (
    Device,
    DeviceInstanceEndpoint,
    DeviceProfile,
    DeviceProfileEndpoint,
    EndpointDataType,
    Farm,
    Telemetry,
)
from devices.reported import ReportedValue, endpoint_reported_values_update
from devices.services import device_endpoints_sync
from devices.services.health import OFFLINE_INTERVALS
from tests.automation.factories import RuleFactory
from tests.common.factories import OrganizationFactory


class FarmFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Farm

    organization = factory.SubFactory(OrganizationFactory)
    name = factory.Sequence(lambda n: f"Farm {n}")
    time_zone = "Europe/Berlin"


class DeviceProfileFactory(factory.django.DjangoModelFactory):
    """A global profile unless given an ``organization``; a device's own is its farm's."""

    class Meta:
        model = DeviceProfile

    organization = None
    name = factory.Sequence(lambda n: f"Profile {n}")


class ProfileEndpointFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = DeviceProfileEndpoint

    profile = factory.SubFactory(DeviceProfileFactory)
    key = factory.Sequence(lambda n: f"ep{n}")
    data_type = EndpointDataType.NUMBER


class DeviceFactory(factory.django.DjangoModelFactory):
    """A device as ``device_create`` leaves it: with its profile's endpoints."""

    class Meta:
        model = Device
        skip_postgeneration_save = True

    farm = factory.SubFactory(FarmFactory)
    profile = factory.SubFactory(
        DeviceProfileFactory, organization=factory.SelfAttribute("..farm.organization")
    )
    serial_number = factory.Sequence(lambda n: f"SN-{n:05d}")
    last_seen_at = factory.LazyFunction(timezone.now)
    offline_after_s = None
    # Heard from, so online until its window passes, as ingest would leave it
    # (``devices.services.health``); ``last_seen_at=None`` makes one never heard from.
    online = factory.LazyAttribute(lambda o: o.last_seen_at is not None)
    offline_due_at = factory.LazyAttribute(
        lambda o: (
            None
            if o.last_seen_at is None
            else o.last_seen_at
            + timedelta(
                seconds=o.offline_after_s or OFFLINE_INTERVALS * o.profile.expected_interval_s
            )
        )
    )

    @factory.post_generation
    def endpoints(obj: Device, create: bool, extracted: Any, **kwargs: Any) -> None:
        if create:
            device_endpoints_sync(device=obj)


class InstanceEndpointFactory(factory.django.DjangoModelFactory):
    """Built by hand, or the one the device already has for that profile endpoint."""

    class Meta:
        model = DeviceInstanceEndpoint
        django_get_or_create = ("device", "profile_endpoint")

    device = factory.SubFactory(DeviceFactory)
    profile_endpoint = factory.SubFactory(ProfileEndpointFactory)


@dataclass
class FarmKit:
    """One farm: a sensor (temp, humidity) and an actuator (io1 relay, fan speed, mode)."""

    farm: Farm
    sensor: Device
    actuator: Device
    temp: DeviceInstanceEndpoint
    humidity: DeviceInstanceEndpoint
    io1: DeviceInstanceEndpoint
    fan: DeviceInstanceEndpoint
    mode: DeviceInstanceEndpoint

    def rule(self, **kwargs: Any) -> AutomationRule:
        defaults: dict[str, Any] = {
            "farm": self.farm,
            "trigger_endpoint": self.temp,
            "target_endpoint": self.io1,
        }
        defaults.update(kwargs)
        return RuleFactory(**defaults)


def make_farm(*, farm: Farm | None = None, prefix: str = "") -> FarmKit:
    farm = farm or FarmFactory()
    sensor_profile = DeviceProfileFactory(organization=farm.organization)
    relay_profile = DeviceProfileFactory(organization=farm.organization)
    temp = ProfileEndpointFactory(profile=sensor_profile, key="temp")
    humidity = ProfileEndpointFactory(profile=sensor_profile, key="humidity")
    io1 = ProfileEndpointFactory(
        profile=relay_profile,
        key="io1",
        data_type=EndpointDataType.BOOL,
        writable=True,
        rpc_method="setIO",
        rpc_param_key="io1",
    )
    fan = ProfileEndpointFactory(
        profile=relay_profile,
        key="fan",
        data_type=EndpointDataType.NUMBER,
        writable=True,
        min_value=0,
        max_value=100,
        rpc_method="setFan",
        rpc_param_key="fan",
    )
    mode = ProfileEndpointFactory(
        profile=relay_profile,
        key="mode",
        data_type=EndpointDataType.ENUM,
        writable=True,
        allowed_values=["auto", "manual"],
        rpc_method="setMode",
        rpc_param_key="mode",
    )
    named = {"serial_number": f"{prefix}-sensor"} if prefix else {}
    sensor = DeviceFactory(farm=farm, profile=sensor_profile, **named)
    named = {"serial_number": f"{prefix}-relay"} if prefix else {}
    actuator = DeviceFactory(farm=farm, profile=relay_profile, **named)

    def instance(device: Device, endpoint: DeviceProfileEndpoint) -> DeviceInstanceEndpoint:
        return InstanceEndpointFactory(device=device, profile_endpoint=endpoint)

    return FarmKit(
        farm=farm,
        sensor=sensor,
        actuator=actuator,
        temp=instance(sensor, temp),
        humidity=instance(sensor, humidity),
        io1=instance(actuator, io1),
        fan=instance(actuator, fan),
        mode=instance(actuator, mode),
    )


def stored_reading(endpoint: DeviceInstanceEndpoint, at: datetime, value: object) -> None:
    """One normalised reading, as ingest leaves it for an endpoint something reads: its
    telemetry row, its endpoint event and the endpoint's newest reported value."""
    device = endpoint.device
    key = endpoint.profile_endpoint.key
    telemetry = Telemetry.objects.create(
        device=device,
        raw_payload=json.dumps({"ts": at.isoformat(), "values": {key: value}}),
        fingerprint=uuid.uuid4().bytes,
        message_ts=at,
        received_at=at,
    )
    AutomationEndpointEvent.objects.create(
        device_instance_endpoint=endpoint,
        source_telemetry=telemetry,
        event_timestamp=at,
        normalized_value=value,
        created_at=at,
    )
    endpoint_reported_values_update(readings=[ReportedValue(endpoint.pk, value, at)])


def bridge_slots_live(*, beat_at: datetime | None = None, holder: str = "host-a:1:abcdef") -> None:
    """Every configured bridge slot held by one process whose bridges beat connected at
    ``beat_at`` (default now): what ``/health`` sees while the bridges run."""
    from django.conf import settings

    from devices.services.bridge_slots import (
        bridge_slot_beat,
        bridge_slot_claim,
        bridge_slot_ids,
        bridge_slots_ensure,
    )

    now = timezone.now()
    ids = bridge_slot_ids(prefix=settings.BRIDGE_SLOT_PREFIX, slots=settings.BRIDGE_SLOTS)
    bridge_slots_ensure(prefix=settings.BRIDGE_SLOT_PREFIX, slots=settings.BRIDGE_SLOTS, now=now)
    while bridge_slot_claim(
        client_ids=ids, holder=holder, lease_s=settings.BRIDGE_LEASE_S, now=now
    ):
        pass
    for client_id in ids:
        bridge_slot_beat(client_id=client_id, holder=holder, connected=True, now=beat_at or now)
