"""``/metrics`` in Prometheus format, right when web, bridge and workers run as separate
processes.

* Rates and latencies are counted where they happen (Celery's ``task_postrun`` for ingest,
  evaluation and dispatch; each ``CommandTransition`` row for acks, applies, timeouts, retries,
  uncertain). With ``PROMETHEUS_MULTIPROC_DIR`` set (before start, in every process) each
  process writes its own files and a scrape sums them (prometheus_client multiprocess mode).
* Backlogs (events pending, commands per live state, scheduler due/overdue/held, open dead
  letters) are read from the database at scrape time, so they are right whoever wrote them.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from datetime import timedelta
from typing import Any

from django.apps import AppConfig
from django.db.models import Count
from django.http import HttpRequest, HttpResponse
from django.utils import timezone
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    REGISTRY,
    CollectorRegistry,
    Counter,
    Histogram,
    generate_latest,
    multiprocess,
)
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"
# A due row this late is "overdue": the scheduler is not keeping up.
SCHEDULER_OVERDUE_AFTER_S = 300
LATENCY_BUCKETS_S = (0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 120)

TASK_RESULTS = Counter(
    "farm_task_items_total",
    "Items a stage task handled, by stage: ingest=endpoint events created, "
    "evaluate=rule executions (matches), dispatch=commands published.",
    ["stage"],
)
TASK_RUNS = Counter("farm_task_runs_total", "Stage task runs by task and state.", ["task", "state"])
COMMAND_TRANSITIONS = Counter(
    "farm_command_transitions_total",
    "Command status changes (dispatched, acknowledged, applied, retrying, failed, expired, "
    "uncertain) by reason; rates of timeouts, retries and uncertain derive from it.",
    ["to_status", "reason"],
)
RULE_DECISIONS = Counter(
    "farm_rule_decisions_total",
    "Rule executions by outcome (intent_created, already_in_state, already_pending, blocked, "
    "suppressed): suppressed counts decisions a cool-down held after the device failed.",
    ["outcome"],
)
DEVICE_MESSAGE_REJECTIONS = Counter(
    "farm_device_message_rejections_total",
    "Device messages (or parts of one) rejected, by message kind and reason code; each is "
    "recorded as a DeviceMessageRejection row (a bridge drop row counts every message it sums).",
    ["kind", "reason"],
)
ACK_LATENCY = Histogram(
    "farm_command_ack_latency_seconds",
    "From the attempt's dispatch to the device's ack.",
    buckets=LATENCY_BUCKETS_S,
)
APPLIED_LATENCY = Histogram(
    "farm_command_applied_latency_seconds",
    "From the latest attempt's dispatch to evidence it was applied.",
    buckets=LATENCY_BUCKETS_S,
)

_STAGE_OF_TASK = {
    "devices.telemetry_ingest": "ingest",
    "automation.endpoint_events_evaluate": "evaluate",
    "automation.command_intents_dispatch": "dispatch",
}


def metrics_task_finished(*, task_name: str, state: str, retval: Any) -> None:
    TASK_RUNS.labels(task=task_name, state=state or "unknown").inc()
    stage = _STAGE_OF_TASK.get(task_name)
    if stage is not None and state == "SUCCESS" and isinstance(retval, int):
        TASK_RESULTS.labels(stage=stage).inc(retval)


def metrics_decisions_counted(*, outcomes: dict[str, int]) -> None:
    for outcome, n in outcomes.items():
        RULE_DECISIONS.labels(outcome=outcome).inc(n)


def metrics_transition_recorded(*, transition: Any) -> None:
    """Count one CommandTransition and, for acks and applies, observe the latency."""
    COMMAND_TRANSITIONS.labels(to_status=transition.to_status, reason=transition.reason_code).inc()
    dispatched_at = getattr(transition.intent, "dispatched_at", None)
    if dispatched_at is None:
        return
    seconds = max(0.0, (transition.at - dispatched_at).total_seconds())
    if transition.to_status == "acknowledged":
        ACK_LATENCY.observe(seconds)
    elif transition.to_status == "applied":
        APPLIED_LATENCY.observe(seconds)


def metrics_rejections_recorded(*, counts: Mapping[tuple[str, str], int]) -> None:
    """Count rejected device messages per (kind, reason code), once their rows committed."""
    for (kind, reason), n in counts.items():
        DEVICE_MESSAGE_REJECTIONS.labels(kind=kind, reason=reason).inc(n)


def _on_task_postrun(sender: Any = None, state: str = "", retval: Any = None, **_: Any) -> None:
    metrics_task_finished(task_name=getattr(sender, "name", ""), state=state, retval=retval)


def _on_transition_saved(sender: Any, instance: Any, created: bool, **_: Any) -> None:
    if created:
        metrics_transition_recorded(transition=instance)


class DatabaseCollector(Collector):
    """Backlogs read at scrape time: whatever process wrote the rows, the count is right."""

    def describe(self) -> list[GaugeMetricFamily]:
        """Nothing to declare up front: registering must not query the database."""
        return []

    def collect(self) -> Iterator[GaugeMetricFamily]:
        from automation.models import AutomationCommandIntent, AutomationEndpointEvent
        from automation.scheduler.selectors import scheduler_backlog, scheduler_due
        from automation.states import COMMAND_LIVE, EventStatus
        from events.selectors import dead_letter_counts

        now = timezone.now()
        backlog = GaugeMetricFamily(
            "farm_backlog", "Work waiting, per stage and state.", labels=["stage", "state"]
        )
        pending = AutomationEndpointEvent.objects.filter(processing_status=EventStatus.PENDING)
        backlog.add_metric(["evaluate", "pending"], pending.count())
        counts = dict.fromkeys(sorted(COMMAND_LIVE), 0)
        for row in (
            AutomationCommandIntent.objects.filter(status__in=COMMAND_LIVE)
            .values("status")
            .annotate(n=Count("id"))
        ):
            counts[row["status"]] = row["n"]
        for status, n in counts.items():
            backlog.add_metric(["command", status], n)
        yield backlog
        from automation.services.cooldown import command_cooldowns_cooling

        cooling = GaugeMetricFamily(
            "farm_command_cooldowns",
            "Target (endpoint, value) pairs cooling down after a failed or uncertain command.",
        )
        cooling.add_metric([], command_cooldowns_cooling(now=now).count())
        yield cooling
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
        dead = GaugeMetricFamily(
            "farm_dead_letters_open",
            "Open dead letters by type, handler and reason (alert when > 0).",
            labels=["event_type", "handler", "reason"],
        )
        for c in dead_letter_counts():
            dead.add_metric([c.event_type, c.handler, c.reason], c.count)
        yield dead


_DATABASE_COLLECTOR = DatabaseCollector()


def metrics_registry() -> CollectorRegistry:
    """Multiprocess: every process's files plus the database; else this process's metrics."""
    if os.environ.get(MULTIPROC_ENV):
        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry, path=os.environ[MULTIPROC_ENV])
        registry.register(_DATABASE_COLLECTOR)
        return registry
    return REGISTRY


def metrics(request: HttpRequest) -> HttpResponse:
    return HttpResponse(generate_latest(metrics_registry()), content_type=CONTENT_TYPE_LATEST)


class MetricsConfig(AppConfig):
    """Installs the counting hooks in every process that loads Django (web, bridge, workers)."""

    name = "config"
    label = "ops_metrics"
    verbose_name = "Operations metrics"

    def ready(self) -> None:
        from celery.signals import task_postrun
        from django.db.models.signals import post_save

        from automation.models import CommandTransition

        task_postrun.connect(_on_task_postrun, weak=False, dispatch_uid="farm-metrics-task")
        post_save.connect(
            _on_transition_saved,
            sender=CommandTransition,
            weak=False,
            dispatch_uid="farm-metrics-transition",
        )
        if not os.environ.get(MULTIPROC_ENV) and _DATABASE_COLLECTOR not in getattr(
            REGISTRY, "_collector_to_names", {}
        ):
            REGISTRY.register(_DATABASE_COLLECTOR)
