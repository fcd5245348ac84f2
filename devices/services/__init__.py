"""Every write of the devices domain: rejections, device provisioning, status changes, the
bridge slots' leases, farms and profiles, and the devices' health (online or offline).
Imported as ``devices.services.<name>``; the modules are an internal split."""

from devices.services.farms import farm_archive, farm_create, farm_update
from devices.services.health import (
    device_offline_after_set,
    devices_heard_from,
    devices_offline_due_refresh,
    devices_offline_sweep,
    profile_expected_interval_set,
)
from devices.services.profiles import (
    EndpointSpec,
    endpoint_spec_problems,
    profile_create,
    profile_endpoints_add,
    profile_rename,
)
from devices.services.provisioning import (
    ProvisionedDevice,
    ProvisioningRefused,
    device_create,
    device_endpoints_sync,
    device_provision,
    device_rename,
    instance_endpoint_configure,
    profile_endpoints_sync,
    profile_fits_farm,
)
from devices.services.rejections import (
    DroppedMessages,
    device_message_rejections_record,
    dropped_messages_record,
)
from devices.services.status import device_status_change

__all__ = [
    "DroppedMessages",
    "EndpointSpec",
    "ProvisionedDevice",
    "ProvisioningRefused",
    "device_create",
    "device_endpoints_sync",
    "device_message_rejections_record",
    "device_offline_after_set",
    "device_provision",
    "device_rename",
    "device_status_change",
    "devices_heard_from",
    "devices_offline_due_refresh",
    "devices_offline_sweep",
    "dropped_messages_record",
    "endpoint_spec_problems",
    "farm_archive",
    "farm_create",
    "farm_update",
    "instance_endpoint_configure",
    "profile_create",
    "profile_endpoints_add",
    "profile_endpoints_sync",
    "profile_expected_interval_set",
    "profile_fits_farm",
    "profile_rename",
]
