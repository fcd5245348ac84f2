"""Every write of the devices domain: rejections, device provisioning, status changes, the
bridge heartbeat.
Imported as ``devices.services.<name>``; the modules are an internal split."""

from devices.services.provisioning import (
    device_create,
    device_endpoints_sync,
    profile_endpoints_sync,
)
from devices.services.rejections import (
    DroppedMessages,
    device_message_rejections_record,
    dropped_messages_record,
)
from devices.services.status import device_status_change

__all__ = [
    "DroppedMessages",
    "device_create",
    "device_endpoints_sync",
    "device_message_rejections_record",
    "device_status_change",
    "dropped_messages_record",
    "profile_endpoints_sync",
]
