"""The execution core's gauges for ``/metrics``, read from its tables at scrape time and
registered with ``config.metrics`` when the app loads (config reads no app's models)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime

from django.db.models import Count
from prometheus_client.core import GaugeMetricFamily

from automation.models import AutomationEndpointEvent, DeviceCommand
from automation.services.cooldown import command_cooldowns_cooling
from automation.states import COMMAND_LIVE, EventStatus
from devices.selectors import telemetry_rollup_lag_s


def execution_core_gauges(now: datetime) -> Iterator[GaugeMetricFamily]:
    backlog = GaugeMetricFamily(
        "farm_backlog", "Work waiting, per stage and state.", labels=["stage", "state"]
    )
    pending = AutomationEndpointEvent.objects.filter(processing_status=EventStatus.PENDING)
    backlog.add_metric(["evaluate", "pending"], pending.count())
    counts = dict.fromkeys(sorted(COMMAND_LIVE), 0)
    for row in (
        DeviceCommand.objects.filter(status__in=COMMAND_LIVE)
        .values("status")
        .annotate(n=Count("id"))
    ):
        counts[row["status"]] = row["n"]
    for status, n in counts.items():
        backlog.add_metric(["command", status], n)
    yield backlog
    cooling = GaugeMetricFamily(
        "farm_command_cooldowns",
        "Target (endpoint, value) pairs cooling down after a failed or uncertain command.",
    )
    cooling.add_metric([], command_cooldowns_cooling(now=now).count())
    yield cooling
    lag = GaugeMetricFamily(
        "farm_telemetry_rollup_lag_seconds",
        "Seconds since the latest instant up to which every stored telemetry row is in the "
        "hourly rollups (one to two TELEMETRY_ROLLUP_INTERVAL_S while the job keeps up).",
    )
    lag.add_metric([], telemetry_rollup_lag_s(now=now))
    yield lag
