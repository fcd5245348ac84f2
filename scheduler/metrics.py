"""The due-work table's gauges for ``/metrics``, read at scrape time and registered with
``config.metrics`` when the app loads; and the counter of trace records not written."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timedelta

from prometheus_client import Counter
from prometheus_client.core import GaugeMetricFamily

import config.metrics  # noqa: F401  # first: it sets the multiprocess value class
from scheduler.selectors import scheduler_backlog, scheduler_due

# A due row this late is "overdue": the scheduler is not keeping up.
SCHEDULER_OVERDUE_AFTER_S = 300

SCHEDULER_TRACE_WRITE_FAILURES = Counter(
    "farm_scheduler_trace_write_failures_total",
    "Execution trace records (TraceRecord) not written: the executions stand, their trace "
    "copy is missing (best-effort, after the row committed).",
)


def scheduler_gauges(now: datetime) -> Iterator[GaugeMetricFamily]:
    scheduler = GaugeMetricFamily(
        "farm_scheduler_rows", "Due-work rows by state.", labels=["state"]
    )
    for state, n in scheduler_backlog().items():
        scheduler.add_metric([state], n)
    due = scheduler_due(now=now)
    scheduler.add_metric(["due"], due.count())
    late = now - timedelta(seconds=SCHEDULER_OVERDUE_AFTER_S)
    scheduler.add_metric(["overdue"], due.filter(scheduled_on__lt=late).count())
    yield scheduler
