"""Every write of the devices domain: telemetry ingest, rejections, device provisioning.
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
from devices.services.telemetry import (
    MAX_TELEMETRY_BYTES,
    InboundTelemetry,
    IngestResult,
    MessageRejection,
    Rejected,
    telemetry_ingest,
)

__all__ = [
    "MAX_TELEMETRY_BYTES",
    "DroppedMessages",
    "InboundTelemetry",
    "IngestResult",
    "MessageRejection",
    "Rejected",
    "device_create",
    "device_endpoints_sync",
    "device_message_rejections_record",
    "dropped_messages_record",
    "profile_endpoints_sync",
    "telemetry_ingest",
]
