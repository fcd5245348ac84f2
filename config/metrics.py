"""``/metrics`` in Prometheus format, right when web, bridge and workers run as separate
processes.

* Rates and latencies are counted where they happen (Celery's ``task_postrun`` for ingest,
  evaluation and dispatch; each ``CommandTransition`` row for acks, applies, timeouts, retries,
  uncertain). With ``PROMETHEUS_MULTIPROC_DIR`` set (before start, in every process) each
  process writes its own files and a scrape sums them (prometheus_client multiprocess mode).
* Backlogs (events pending, commands per live state, scheduler due/overdue/held, open dead
  letters) are read from the database at scrape time, so they are right whoever wrote them;
  each app registers its own (``metrics_gauges_register``), so this module reads no models.
  A source that fails (the database is down) is left out of that scrape and reported as
  ``farm_metrics_source_up{source} 0``; the process's own series are still answered.
* A scrape needs ``Authorization: Bearer <METRICS_TOKEN>``; with no token set, only a loopback
  client whose request no proxy forwarded is answered.
"""

from __future__ import annotations

import hmac
import ipaddress
import logging
import os
import socket
from collections.abc import Callable, Iterable, Iterator, Mapping
from datetime import datetime
from typing import Any

from django.apps import AppConfig
from django.conf import settings
from django.db import transaction
from django.http import HttpRequest, HttpResponse
from django.utils import timezone
from django.views.decorators.cache import never_cache
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    REGISTRY,
    CollectorRegistry,
    Counter,
    Histogram,
    generate_latest,
    multiprocess,
    values,
)
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from config.env import credentials_masked
from config.task_names import (
    COMMANDS_DISPATCH,
    EVENTS_EVALUATE,
    PREVIOUS_TASK_NAMES,
    TELEMETRY_INGEST,
)

logger = logging.getLogger(__name__)

MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"
# A request carrying one of these came through a proxy: its loopback address is the proxy's.
FORWARDING_HEADERS = ("HTTP_X_FORWARDED_FOR", "HTTP_FORWARDED", "HTTP_X_REAL_IP")
LATENCY_BUCKETS_S = (0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 120)


def process_identifier() -> str:
    """Names this process's metric files: host and pid, because processes of several
    containers (each numbering its pids from 1) may share one directory."""
    return f"{socket.gethostname()}-{os.getpid()}"


if os.environ.get(MULTIPROC_ENV):  # before any series below is created
    values.ValueClass = values.MultiProcessValue(process_identifier=process_identifier)

TASK_RESULTS = Counter(
    "farm_task_items_total",
    "Items a stage handled, by stage: ingest=endpoint events created (by the bridge), "
    "evaluate=rule executions (matches), dispatch=commands published.",
    ["stage"],
)
TASK_RUNS = Counter("farm_task_runs_total", "Stage task runs by task and state.", ["task", "state"])
BRIDGE_STORED = Counter(
    "farm_bridge_messages_stored_total",
    "Device messages the MQTT bridge committed to the database before acknowledging them, by "
    "kind (telemetry, reply): the edge's throughput; flat while telemetry arrives means the "
    "bridges are down or cannot reach the database.",
    ["kind"],
)
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
RETENTION_PRUNED = Counter(
    "farm_retention_pruned_rows_total",
    "Rows deleted past their table's retention (common.retention), by table.",
    ["table"],
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

STAGE_LATENCY = Histogram(
    "farm_command_stage_seconds",
    "Per applied command, the time each hop of the pipeline took: reading received by the "
    "bridge → ingested → rule decided → request published → acknowledged → applied.",
    ["hop"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60),
)

_STAGE_OF_TASK = {
    TELEMETRY_INGEST: "ingest",
    EVENTS_EVALUATE: "evaluate",
    COMMANDS_DISPATCH: "dispatch",
}
# A task run under its previous name counts for its stage too (for one release).
_STAGE_OF_TASK |= {
    old: _STAGE_OF_TASK[new] for old, new in PREVIOUS_TASK_NAMES.items() if new in _STAGE_OF_TASK
}


def metrics_task_finished(*, task_name: str, state: str, retval: Any) -> None:
    TASK_RUNS.labels(task=task_name, state=state or "unknown").inc()
    stage = _STAGE_OF_TASK.get(task_name)
    if stage is not None and state == "SUCCESS" and isinstance(retval, int):
        TASK_RESULTS.labels(stage=stage).inc(retval)


def metrics_bridge_stored(*, kind: str, messages: int, events: int = 0) -> None:
    """A committed bridge batch: its messages, and the endpoint events it created (counted as
    the ingest stage's items, as the ingest task's were)."""
    BRIDGE_STORED.labels(kind=kind).inc(messages)
    if events:
        TASK_RESULTS.labels(stage="ingest").inc(events)


def metrics_decisions_counted(*, outcomes: dict[str, int]) -> None:
    for outcome, n in outcomes.items():
        RULE_DECISIONS.labels(outcome=outcome).inc(n)


def metrics_transition_recorded(*, transition: Any) -> None:
    """Count one CommandTransition and, for acks and applies, observe the latency."""
    COMMAND_TRANSITIONS.labels(to_status=transition.to_status, reason=transition.reason_code).inc()
    if transition.to_status not in ("acknowledged", "applied"):
        return  # no latency to observe: not worth loading the command (one SELECT each)
    dispatched_at = getattr(transition.command, "dispatched_at", None)
    if dispatched_at is None:
        return
    seconds = max(0.0, (transition.at - dispatched_at).total_seconds())
    if transition.to_status == "acknowledged":
        ACK_LATENCY.observe(seconds)
    elif transition.to_status == "applied":
        APPLIED_LATENCY.observe(seconds)


def metrics_transitions_recorded(*, transitions: Iterable[Any]) -> None:
    """``metrics_transition_recorded`` for audit rows written in bulk (no ``post_save``)."""
    for transition in transitions:
        metrics_transition_recorded(transition=transition)


def metrics_stage_latencies_observed(*, hops: Iterable[tuple[str, float]]) -> None:
    """Seconds each hop of an applied command took (``automation.services.latency``)."""
    for hop, seconds in hops:
        STAGE_LATENCY.labels(hop=hop).observe(max(0.0, seconds))


def metrics_rejections_recorded(*, counts: Mapping[tuple[str, str], int]) -> None:
    """Count rejected device messages per (kind, reason code), once their rows committed."""
    for (kind, reason), n in counts.items():
        DEVICE_MESSAGE_REJECTIONS.labels(kind=kind, reason=reason).inc(n)


def _on_task_postrun(sender: Any = None, state: str = "", retval: Any = None, **_: Any) -> None:
    metrics_task_finished(task_name=getattr(sender, "name", ""), state=state, retval=retval)


def metrics_transition_saved(sender: Any, instance: Any, created: bool, **_: Any) -> None:
    """``post_save`` receiver for the command ledger's audit rows (connected by automation)."""
    if created:
        metrics_transition_recorded(transition=instance)


GaugeSource = Callable[[datetime], Iterable[GaugeMetricFamily]]
_GAUGE_SOURCES: dict[str, GaugeSource] = {}


def metrics_gauges_register(name: str, source: GaugeSource) -> None:
    """An app adds gauges read from its tables at scrape time (from its ``AppConfig.ready``),
    so this module reads no app's models; registering a name again replaces it."""
    _GAUGE_SOURCES[name] = source


class DatabaseCollector(Collector):
    """Backlogs read at scrape time: whatever process wrote the rows, the count is right."""

    def describe(self) -> list[GaugeMetricFamily]:
        """Nothing to declare up front: registering must not query the database."""
        return []

    def collect(self) -> Iterator[GaugeMetricFamily]:
        now = timezone.now()
        up = GaugeMetricFamily(
            "farm_metrics_source_up",
            "1 when the source's gauges were read at this scrape, 0 when it failed (its series "
            "are missing from this scrape; the web process logs why).",
            labels=["source"],
        )
        for name, source in list(_GAUGE_SOURCES.items()):
            families = _source_read(name, source, now)
            up.add_metric([name], 0 if families is None else 1)
            yield from families or ()
        yield up


def _source_read(name: str, source: GaugeSource, now: datetime) -> list[GaugeMetricFamily] | None:
    """One source's families, read whole inside a savepoint so that a failed query neither
    half-writes the scrape nor breaks the next source's; None when it failed."""
    try:
        with transaction.atomic():
            return list(source(now))
    except Exception as exc:
        error = credentials_masked(f"{type(exc).__name__}: {exc}")
        logger.warning("metrics source %s failed: %s", name, error)
        return None


_DATABASE_COLLECTOR = DatabaseCollector()


def metrics_registry() -> CollectorRegistry:
    """Multiprocess: every process's files plus the database; else this process's metrics."""
    if os.environ.get(MULTIPROC_ENV):
        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry, path=os.environ[MULTIPROC_ENV])
        registry.register(_DATABASE_COLLECTOR)
        return registry
    return REGISTRY


def metrics_scrape_refused(request: HttpRequest) -> HttpResponse | None:
    """Why this request may not scrape (401/403), or None: the bearer token when one is set
    (compared in constant time), else a direct loopback client."""
    token = str(settings.METRICS_TOKEN)
    if token:
        scheme, _, given = request.headers.get("Authorization", "").partition(" ")
        if scheme.lower() == "bearer" and hmac.compare_digest(
            given.strip().encode(), token.encode()
        ):
            return None
        refused = HttpResponse(
            "a bearer token is required\n", status=401, content_type="text/plain"
        )
        refused["WWW-Authenticate"] = 'Bearer realm="metrics"'
        return refused
    if _loopback(request.META.get("REMOTE_ADDR", "")) and not any(
        header in request.META for header in FORWARDING_HEADERS
    ):
        return None
    return HttpResponse(
        "only loopback clients may scrape while METRICS_TOKEN is unset\n",
        status=403,
        content_type="text/plain",
    )


def _loopback(address: str) -> bool:
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return False
    mapped = ip.ipv4_mapped if isinstance(ip, ipaddress.IPv6Address) else None
    return (mapped or ip).is_loopback


@never_cache
def metrics(request: HttpRequest) -> HttpResponse:
    refused = metrics_scrape_refused(request)
    if refused is not None:
        return refused
    return HttpResponse(generate_latest(metrics_registry()), content_type=CONTENT_TYPE_LATEST)


class MetricsConfig(AppConfig):
    """Installs the counting hooks in every process that loads Django (web, bridge, workers)."""

    name = "config"
    label = "ops_metrics"
    verbose_name = "Operations metrics"

    def ready(self) -> None:
        from celery.signals import task_postrun

        task_postrun.connect(_on_task_postrun, weak=False, dispatch_uid="farm-metrics-task")
        if not os.environ.get(MULTIPROC_ENV) and _DATABASE_COLLECTOR not in getattr(
            REGISTRY, "_collector_to_names", {}
        ):
            REGISTRY.register(_DATABASE_COLLECTOR)
