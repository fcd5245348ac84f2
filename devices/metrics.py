"""``/metrics`` gauges of the devices app read at scrape time: the devices offline."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime

from prometheus_client.core import GaugeMetricFamily

from devices.selectors import devices_offline_count


def device_health_gauges(now: datetime) -> Iterator[GaugeMetricFamily]:
    """One COUNT on the partial index ``device_offline``, whatever the fleet's size."""
    offline = GaugeMetricFamily(
        "farm_devices_offline",
        "Devices heard from once and silent past their offline window since (retired ones "
        "left out); a device never heard from is not counted.",
    )
    offline.add_metric([], devices_offline_count())
    yield offline
