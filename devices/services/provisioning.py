"""Provisioning: a device has one endpoint per endpoint of its profile, however it came to be
(this service, the admin, the demo), moved to another profile or its profile extended.
Telemetry can then name only keys its profile declares, or be recorded as unknown_endpoint.
A device uses a global profile or one of its farm's organisation. A device provisioned over
the API gets its MQTT login in the same transaction: a broker that does not confirm it leaves
no device behind."""

from __future__ import annotations

from dataclasses import dataclass

from django.db import IntegrityError, transaction
from django.db.models import QuerySet

from common.audit.writes import audited_update
from devices.models import Device, DeviceInstanceEndpoint, DeviceProfile, DeviceStatus, Farm
from devices.services.credentials import DeviceCredentials, device_credentials_issue

SYNC_BATCH_SIZE = 1000  # endpoint rows per INSERT


class ProvisioningRefused(Exception):
    """A write the domain refuses (a taken name or serial, a bad catalogue entry); ``field``
    names the input at fault, so the API answers with a field error."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field
        self.message = message


@dataclass(frozen=True)
class ProvisionedDevice:
    device: Device
    credentials: DeviceCredentials | None  # None: the broker's logins are managed elsewhere


def profile_fits_farm(*, profile: DeviceProfile, farm: Farm) -> bool:
    """A device may use a global profile or one of its farm's organisation, never another
    organisation's (its catalogue is that organisation's to change)."""
    return profile.organization_id in (None, farm.organization_id)


def device_create(
    *,
    farm: Farm,
    profile: DeviceProfile,
    serial_number: str,
    name: str = "",
    status: str = DeviceStatus.ACTIVE,
) -> Device:
    """Create a device together with its profile's endpoints, in one transaction; a profile
    of another organisation than the farm's is refused."""
    if not profile_fits_farm(profile=profile, farm=farm):
        raise ProvisioningRefused(
            "profile", "not a profile of the farm's organisation, nor a global one"
        )
    with transaction.atomic():
        device = Device.objects.create(
            farm=farm, profile=profile, serial_number=serial_number, name=name, status=status
        )
        device_endpoints_sync(device=device)
    return device


def device_provision(
    *, farm: Farm, profile: DeviceProfile, serial_number: str, name: str = ""
) -> ProvisionedDevice:
    """``device_create`` and the device's MQTT login as one unit: ``CredentialsUnavailable``
    from the broker propagates and rolls the device back; a taken serial is refused."""
    try:
        with transaction.atomic():
            device = device_create(
                farm=farm, profile=profile, serial_number=serial_number, name=name
            )
            credentials = device_credentials_issue(serial_number=serial_number)
    except IntegrityError:
        raise ProvisioningRefused(
            "serial_number", "a device with this serial number exists"
        ) from None
    return ProvisionedDevice(device=device, credentials=credentials)


def device_rename(*, device: Device, name: str) -> Device:
    audited_update(Device.objects.filter(pk=device.pk), name=name)
    device.name = name
    return device


def instance_endpoint_configure(
    *, endpoint: DeviceInstanceEndpoint, changes: dict[str, bool | str]
) -> DeviceInstanceEndpoint:
    """Switch a device's endpoint on or off, or override its RPC method or parameter key.
    Saved with ``updated_at``, which lifts the endpoint's command cool-downs."""
    allowed = {"is_enabled", "rpc_method_override", "rpc_param_key_override"}
    unknown = set(changes) - allowed
    if unknown:
        raise ProvisioningRefused(sorted(unknown)[0], "cannot be changed on an endpoint")
    for name, value in changes.items():
        setattr(endpoint, name, value)
    endpoint.save(update_fields=[*changes, "updated_at"])
    return endpoint


def device_endpoints_sync(*, device: Device) -> None:
    """Add the endpoints of the device's (saved) profile it lacks. Idempotent: existing rows,
    hand-made ones and those of an earlier profile (rules and events point at them) stay."""
    _endpoints_sync(Device.objects.filter(pk=device.pk))


def profile_endpoints_sync(*, profile: DeviceProfile) -> None:
    """Give every device of ``profile`` the profile's endpoints it lacks (one added later)."""
    _endpoints_sync(Device.objects.filter(profile=profile))


def _endpoints_sync(devices: QuerySet[Device]) -> None:
    """One read of (device, profile endpoint) pairs, one insert that skips the pairs already
    there (the one_instance_per_endpoint constraint), whatever the number of devices."""
    pairs = devices.values_list("pk", "profile__endpoints")
    rows = [
        DeviceInstanceEndpoint(device_id=device_id, profile_endpoint_id=endpoint_id)
        for device_id, endpoint_id in pairs
        if endpoint_id is not None
    ]
    DeviceInstanceEndpoint.objects.bulk_create(
        rows, ignore_conflicts=True, batch_size=SYNC_BATCH_SIZE
    )
