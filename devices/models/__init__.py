"""Devices domain tables (docs/spec.md §2), one module per concern; imported here so
``devices.models`` stays the one place to import them from (migrations name
``devices.models.validate_serial_number``)."""

from devices.models.bridge import BridgeProcess, BridgeSlot
from devices.models.fleet import (
    DEFAULT_EXPECTED_INTERVAL_S,
    Device,
    DeviceInstanceEndpoint,
    DeviceProfile,
    DeviceProfileEndpoint,
    DeviceStatus,
    EndpointDataType,
    Farm,
    validate_serial_number,
)
from devices.models.health import DeviceHealthCause, DeviceHealthTransition
from devices.models.telemetry import (
    DeviceMessageKind,
    DeviceMessageRejection,
    DeviceMessageRejectionReason,
    Telemetry,
    TelemetryRollup,
    TelemetryRollupWatermark,
)

__all__ = [
    "DEFAULT_EXPECTED_INTERVAL_S",
    "BridgeProcess",
    "BridgeSlot",
    "Device",
    "DeviceHealthCause",
    "DeviceHealthTransition",
    "DeviceInstanceEndpoint",
    "DeviceMessageKind",
    "DeviceMessageRejection",
    "DeviceMessageRejectionReason",
    "DeviceProfile",
    "DeviceProfileEndpoint",
    "DeviceStatus",
    "EndpointDataType",
    "Farm",
    "Telemetry",
    "TelemetryRollup",
    "TelemetryRollupWatermark",
    "validate_serial_number",
]
