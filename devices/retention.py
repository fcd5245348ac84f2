"""What the devices app keeps (``common.retention``): raw telemetry while any endpoint event
points at it and until the hourly rollups have folded it in, the rollups themselves for two
years, and rejected messages for a short while."""

from __future__ import annotations

from django.db.models import Q

from common.retention import Retention, retention_register
from devices.selectors import telemetry_rolled_up_through


def _rolled_up() -> Q:
    """A reading the rollups have not reached stays, however old (a stalled rollup job must
    not lose readings)."""
    return Q(pk__lte=telemetry_rolled_up_through())


def devices_retention_register() -> None:
    retention_register(
        Retention(
            "devices.Telemetry", "RETENTION_TELEMETRY_DAYS", "received_at", prunable=_rolled_up
        )
    )
    retention_register(
        Retention("devices.DeviceMessageRejection", "RETENTION_REJECTIONS_DAYS", "recorded_at")
    )
    retention_register(Retention("devices.TelemetryRollup", "RETENTION_ROLLUPS_DAYS", "hour"))
