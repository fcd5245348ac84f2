"""Alarms' gauge for ``/metrics``, read at scrape time (registered with ``config.metrics`` when
the app loads): open alarms (active or acknowledged) by severity."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime

from django.db.models import Count
from prometheus_client.core import GaugeMetricFamily

from alarms.models import Alarm
from alarms.states import ALARM_OPEN, AlarmSeverity


def alarms_gauges(now: datetime) -> Iterator[GaugeMetricFamily]:
    """One grouped query; every severity is answered (0 when none), so an alert rule never
    sees its series vanish."""
    gauge = GaugeMetricFamily(
        "farm_alarms_open",
        "Open alarms (active or acknowledged, not cleared) by severity.",
        labels=["severity"],
    )
    by_severity = dict.fromkeys(AlarmSeverity.values, 0)
    rows = (
        Alarm.objects.filter(status__in=sorted(ALARM_OPEN))
        .values_list("severity")
        .annotate(n=Count("id"))
        .order_by()
    )
    for severity, n in rows:
        by_severity[severity] = n
    for severity, n in by_severity.items():
        gauge.add_metric([severity], n)
    yield gauge
