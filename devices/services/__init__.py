"""Every write of the devices domain: telemetry ingest, rejections, device provisioning.
Imported as ``devices.services.<name>``; the modules are an internal split."""

from devices.services.rejections import (
    DroppedMessages,
    device_message_rejections_record,
    dropped_messages_record,
)
from devices.services.telemetry import (
    MAX_TELEMETRY_BYTES,
    InboundTelemetry,
    IngestResult,
    Rejected,
    telemetry_ingest,
)

__all__ = [
    "MAX_TELEMETRY_BYTES",
    "DroppedMessages",
    "InboundTelemetry",
    "IngestResult",
    "Rejected",
    "device_message_rejections_record",
    "dropped_messages_record",
    "telemetry_ingest",
]
