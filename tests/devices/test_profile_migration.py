"""The migration that gives device profiles an organisation: a profile goes to the
organisation of its devices; one used by two organisations is copied, with its catalogue, for
the second, whose devices and instance endpoints (the rows rules and events point at, which
keep their ids) move to the copy; an unused profile stays global. Backwards, names are made
unique again."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from django.db import IntegrityError, transaction
from django.db.migrations.executor import MigrationExecutor

from tests.migrating import migrate_to

BEFORE = [("devices", "0009_farm_manual_override_minutes")]
AFTER = [("devices", "0011_profile_name_per_org")]


@dataclass
class Legacy:
    """Ids of the rows built before the migration."""

    alpha: int  # organisations; alpha's id is the lower
    beta: int
    relay: int  # used by alpha's two devices and beta's one
    sensor: int  # used by beta's second device only
    spare: int  # used by no device
    alpha_devices: list[int]
    beta_relay: int
    beta_sensor: int
    relay_instances: dict[int, dict[str, int]]  # device id -> key -> instance endpoint id
    leftover: int  # beta_sensor's endpoint still on relay's io1 (from an earlier profile)
    apps: Any = None  # the models as the migration left them, not as later ones grew them

    def model(self, name: str) -> Any:
        return self.apps.get_model("devices", name)


def _legacy_rows(apps: Any) -> Legacy:
    Organization = apps.get_model("common", "Organization")
    Farm = apps.get_model("devices", "Farm")
    Profile = apps.get_model("devices", "DeviceProfile")
    Endpoint = apps.get_model("devices", "DeviceProfileEndpoint")
    Device = apps.get_model("devices", "Device")
    Instance = apps.get_model("devices", "DeviceInstanceEndpoint")
    alpha, beta = (Organization.objects.create(name=name) for name in ("Alpha", "Beta"))
    farm_a = Farm.objects.create(organization=alpha, name="A")
    farm_b = Farm.objects.create(organization=beta, name="B")
    relay, sensor, spare = (
        Profile.objects.create(name=name) for name in ("Relay", "Sensor", "Spare")
    )
    writable = {"writable": True, "rpc_method": "setIO", "rpc_param_key": "io1"}
    io1 = Endpoint.objects.create(profile=relay, key="io1", data_type="bool", **writable)
    fan = Endpoint.objects.create(profile=relay, key="fan", data_type="number", max_value=100)
    temp = Endpoint.objects.create(profile=sensor, key="temp", data_type="number")
    Endpoint.objects.create(profile=spare, key="x", data_type="number")
    devices = [
        Device.objects.create(farm=farm, profile=relay, serial_number=serial)
        for farm, serial in ((farm_a, "A-1"), (farm_a, "A-2"), (farm_b, "B-1"))
    ]
    relay_instances = {
        device.pk: {
            endpoint.key: Instance.objects.create(device=device, profile_endpoint=endpoint).pk
            for endpoint in (io1, fan)
        }
        for device in devices
    }
    beta_sensor = Device.objects.create(farm=farm_b, profile=sensor, serial_number="B-2")
    Instance.objects.create(device=beta_sensor, profile_endpoint=temp)
    leftover = Instance.objects.create(device=beta_sensor, profile_endpoint=io1)
    return Legacy(
        alpha=alpha.pk,
        beta=beta.pk,
        relay=relay.pk,
        sensor=sensor.pk,
        spare=spare.pk,
        alpha_devices=[devices[0].pk, devices[1].pk],
        beta_relay=devices[2].pk,
        beta_sensor=beta_sensor.pk,
        relay_instances=relay_instances,
        leftover=leftover.pk,
    )


def _migrate(target: list[tuple[str, str]]) -> MigrationExecutor:
    return migrate_to(target)


def _latest() -> None:
    """Every app at its latest: going back also unapplied whatever depends on devices."""
    migrate_to()


@pytest.fixture
def legacy(transactional_db: None) -> Iterator[Legacy]:
    executor = _migrate(BEFORE)
    try:
        rows = _legacy_rows(executor.loader.project_state(BEFORE).apps)
    finally:
        executor = _migrate(AFTER)
    rows.apps = executor.loader.project_state(AFTER).apps
    yield rows
    _latest()


def _endpoint_of(legacy: Legacy, instance_id: int) -> tuple[int, str]:
    instances = legacy.model("DeviceInstanceEndpoint").objects
    row = instances.select_related("profile_endpoint").get(pk=instance_id)
    return row.profile_endpoint.profile_id, row.profile_endpoint.key


@pytest.mark.django_db(transaction=True)
def test_profiles_go_to_their_devices_organisations(legacy: Legacy) -> None:
    DeviceProfile = legacy.model("DeviceProfile")
    relay = DeviceProfile.objects.get(pk=legacy.relay)
    assert relay.organization_id == legacy.alpha  # the lower id keeps the original
    copy = DeviceProfile.objects.get(name="Relay", organization_id=legacy.beta)
    assert copy.pk != relay.pk
    catalogue = {
        e.key: (e.data_type, e.writable, e.rpc_method, e.rpc_param_key, e.max_value)
        for e in copy.endpoints.all()
    }
    assert catalogue == {
        e.key: (e.data_type, e.writable, e.rpc_method, e.rpc_param_key, e.max_value)
        for e in relay.endpoints.all()
    }
    assert set(catalogue) == {"io1", "fan"}
    assert DeviceProfile.objects.get(pk=legacy.sensor).organization_id == legacy.beta
    assert DeviceProfile.objects.get(pk=legacy.spare).organization_id is None
    names = DeviceProfile.objects.values_list("name", "organization_id")
    assert sorted(names, key=str) == sorted(
        [
            ("Relay", legacy.alpha),
            ("Relay", legacy.beta),
            ("Sensor", legacy.beta),
            ("Spare", None),
        ],
        key=str,
    )


@pytest.mark.django_db(transaction=True)
def test_the_second_organisations_devices_and_endpoints_move_to_its_copy(
    legacy: Legacy,
) -> None:
    DeviceProfile, Device = legacy.model("DeviceProfile"), legacy.model("Device")
    DeviceInstanceEndpoint = legacy.model("DeviceInstanceEndpoint")
    copy = DeviceProfile.objects.get(name="Relay", organization_id=legacy.beta)
    assert Device.objects.get(pk=legacy.beta_relay).profile_id == copy.pk
    for device_id in legacy.alpha_devices:
        assert Device.objects.get(pk=device_id).profile_id == legacy.relay
    for device_id, instances in legacy.relay_instances.items():
        owner = copy.pk if device_id == legacy.beta_relay else legacy.relay
        for key, instance_id in instances.items():  # same ids: rules still point at them
            assert _endpoint_of(legacy, instance_id) == (owner, key)
    assert Device.objects.get(pk=legacy.beta_sensor).profile_id == legacy.sensor
    assert _endpoint_of(legacy, legacy.leftover) == (copy.pk, "io1")  # beta's, even off its profile
    untouched = DeviceInstanceEndpoint.objects.filter(profile_endpoint__profile_id=legacy.relay)
    organisations = set(untouched.values_list("device__farm__organization_id", flat=True))
    assert organisations == {legacy.alpha}


@pytest.mark.django_db(transaction=True)
def test_names_are_unique_per_organisation_and_among_global_profiles(legacy: Legacy) -> None:
    DeviceProfile = legacy.model("DeviceProfile")
    for organization_id, name in ((legacy.alpha, "Relay"), (None, "Spare")):
        with pytest.raises(IntegrityError), transaction.atomic():
            DeviceProfile.objects.create(organization_id=organization_id, name=name)
    assert DeviceProfile.objects.create(organization_id=None, name="Relay").pk  # global


@pytest.mark.django_db(transaction=True)
def test_backwards_every_name_is_unique_again(legacy: Legacy) -> None:
    copy = legacy.model("DeviceProfile").objects.get(name="Relay", organization_id=legacy.beta)
    executor = _migrate(BEFORE)
    Profile = executor.loader.project_state(BEFORE).apps.get_model("devices", "DeviceProfile")
    names = dict(Profile.objects.values_list("pk", "name"))
    assert names[legacy.relay] == "Relay" and names[copy.pk] == f"Relay [{copy.pk}]"
    assert len(set(names.values())) == len(names)
