"""What the devices app keeps (``common.retention``): raw telemetry, by device time, while
any endpoint event points at it and until the hourly rollups have folded it in (on
PostgreSQL a whole day's partition is dropped at once), the rollups themselves for two
years, rejected messages for a short while, and the devices' online/offline moves."""

from __future__ import annotations

from datetime import datetime

from django.db.models import Q

from common.retention import Retention, retention_register
from devices.models import Telemetry
from devices.selectors import telemetry_rolled_up_through


def _rolled_up() -> Q:
    """A reading the rollups have not reached stays, however old (a stalled rollup job must
    not lose readings)."""
    return Q(pk__lte=telemetry_rolled_up_through())


def _unrolled_in(lo: datetime, hi: datetime) -> bool:
    """A time partition holds a reading the rollups have not reached: it stays."""
    rows = Telemetry.objects.filter(message_ts__gte=lo, message_ts__lt=hi)
    return rows.filter(pk__gt=telemetry_rolled_up_through()).exists()


def devices_retention_register() -> None:
    retention_register(
        Retention(
            "devices.Telemetry",
            "RETENTION_TELEMETRY_DAYS",
            "message_ts",
            prunable=_rolled_up,
            partition_keep=_unrolled_in,
        )
    )
    retention_register(
        Retention("devices.DeviceMessageRejection", "RETENTION_REJECTIONS_DAYS", "recorded_at")
    )
    retention_register(Retention("devices.TelemetryRollup", "RETENTION_ROLLUPS_DAYS", "hour"))
    retention_register(
        Retention("devices.DeviceHealthTransition", "RETENTION_DEVICE_HEALTH_DAYS", "recorded_at")
    )
