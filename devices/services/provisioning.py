"""Provisioning: a device has one endpoint per endpoint of its profile, however it came to be
(this service, the admin, the demo), moved to another profile or its profile extended.
Telemetry can then name only keys its profile declares, or be recorded as unknown_endpoint."""

from __future__ import annotations

from django.db import transaction
from django.db.models import QuerySet

from devices.models import Device, DeviceInstanceEndpoint, DeviceProfile, DeviceStatus, Farm

SYNC_BATCH_SIZE = 1000  # endpoint rows per INSERT


def device_create(
    *,
    farm: Farm,
    profile: DeviceProfile,
    serial_number: str,
    name: str = "",
    status: str = DeviceStatus.ACTIVE,
) -> Device:
    """Create a device together with its profile's endpoints, in one transaction."""
    with transaction.atomic():
        device = Device.objects.create(
            farm=farm, profile=profile, serial_number=serial_number, name=name, status=status
        )
        device_endpoints_sync(device=device)
    return device


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
