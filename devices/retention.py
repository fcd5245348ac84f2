"""What the devices app keeps (``common.retention``): raw telemetry while hourly rollups and
any endpoint event still point at it, and rejected messages for a short while."""

from __future__ import annotations

from common.retention import Retention, retention_register


def devices_retention_register() -> None:
    retention_register(Retention("devices.Telemetry", "RETENTION_TELEMETRY_DAYS", "received_at"))
    retention_register(
        Retention("devices.DeviceMessageRejection", "RETENTION_REJECTIONS_DAYS", "recorded_at")
    )
