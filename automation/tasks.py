"""Celery tasks of the execution core: take ids, call one service, own retries only.

Follow-up work is queued after commit on the task objects (``common.handoff.enqueue_ids``); beat
sweeps re-derive all pending work from SQL, so a lost message only delays it.
"""

from __future__ import annotations

import logging
from datetime import timedelta

from celery import shared_task
from django.conf import settings
from django.utils import timezone

from automation import coordination
from automation.services.claim import DispatchOutcome
from automation.services.dispatch import command_intents_dispatch, command_intents_due
from automation.services.evaluate import endpoint_events_evaluate, endpoint_events_pending
from automation.services.ingest import telemetry_ingest
from automation.services.receipts import device_messages_record
from automation.services.reconcile import command_intents_overdue, command_intents_reconcile
from automation.services.rule_cache import metric_endpoints
from common.handoff import COMMANDS_DISPATCH, METRICS_TOUCHED, enqueue, enqueue_ids
from config.celery import DB_RETRY, previous_name, routed_to
from config.metrics import metrics_decisions_counted
from devices.mqtt.messages import (
    DEVICE_MESSAGES_TASK,
    TELEMETRY_TASK,
    DeviceMessage,
    InboundTelemetry,
    WireRow,
)
from devices.mqtt.publisher import get_publisher

logger = logging.getLogger(__name__)
SCHEDULER_POLL_DUE = "scheduler.poll_due"


def _metrics_touched(endpoint_ids: list[int]) -> None:
    """Threshold reminders re-evaluate over the watched endpoints with new readings (we run
    after commit). Which endpoints are watched comes from the configuration cache
    (``metric_endpoints``): one read of the version while nothing changed, not a query of
    the sources per batch. A source made after the read is caught up by the reminders'
    reconciliation pass."""
    watched = sorted(metric_endpoints().intersection(endpoint_ids))
    if watched:
        enqueue(METRICS_TOUCHED, watched)


def _chunks(ids: list[int], size: int) -> list[list[int]]:
    return [ids[i : i + size] for i in range(0, len(ids), size)]


def endpoint_events_enqueue(event_ids: list[int]) -> None:
    for chunk in _chunks(event_ids, settings.EVALUATE_BATCH_SIZE):
        enqueue_ids(endpoint_events_evaluate_task, chunk)


# Batches an older bridge queued before the upgrade, by the names it sent them under
# (``devices.mqtt.messages``); the bridge now commits what it receives itself
# (``automation.services.edge``) and sends only ids.
@shared_task(name=TELEMETRY_TASK, **routed_to("ingest"), **DB_RETRY)
def telemetry_ingest_task(messages: list[WireRow]) -> int:
    """A batch of telemetry queued by an older bridge: ingested here, evaluation following in
    this task (``EVALUATE_INLINE``) or on the evaluate queue."""
    inline = settings.EVALUATE_INLINE
    result = telemetry_ingest(
        messages=[InboundTelemetry.from_task_arg(m) for m in messages],
        on_events=None if inline else endpoint_events_enqueue,
    )
    enqueue_ids(command_intents_reconcile_task, result.awaiting_command_ids)
    if inline:
        for chunk in _chunks(result.pending_event_ids, settings.EVALUATE_BATCH_SIZE):
            try:
                events_evaluate(chunk)
            except Exception as exc:  # the events are committed: the evaluate queue retries
                logger.warning("inline evaluation failed, handed to the queue: %s", exc)
                enqueue_ids(endpoint_events_evaluate_task, chunk)
    return result.events


# Its name from when ingest lived in the devices app, for batches queued across the upgrade.
previous_name(telemetry_ingest_task, "devices.telemetry_ingest")


def _dispatch_nudge(intent_ids: list[int]) -> None:
    enqueue_ids(command_intents_dispatch_task, intent_ids)


@shared_task(name="automation.endpoint_events_evaluate", **routed_to("evaluate"), **DB_RETRY)
def endpoint_events_evaluate_task(event_ids: list[int]) -> int:
    return events_evaluate(event_ids)


def events_evaluate(event_ids: list[int]) -> int:
    """Evaluate committed events, then hand on what follows: dispatch of new commands and
    threshold reminders. The commands the readings may prove were handed to reconciliation
    by ingest itself (``IngestResult.awaiting_command_ids``)."""
    result = endpoint_events_evaluate(event_ids=event_ids, on_intents=_dispatch_nudge)
    metrics_decisions_counted(outcomes=result.outcomes)
    if result.endpoint_ids:
        _metrics_touched(result.endpoint_ids)
    return result.executions


@shared_task(name="automation.endpoint_events_sweep", **routed_to("evaluate"))
def endpoint_events_sweep_task() -> int:
    """Re-queue events left pending (a lost Celery message), in one bounded batch."""
    older_than = timezone.now() - timedelta(seconds=settings.EVENT_SWEEP_AFTER_S)
    ids = endpoint_events_pending(older_than=older_than, limit=settings.SWEEP_BATCH_SIZE)
    endpoint_events_enqueue(ids)
    return len(ids)


@shared_task(name=COMMANDS_DISPATCH, **routed_to("dispatch"), **DB_RETRY)
def command_intents_dispatch_task(intent_ids: list[int], trust_cache: bool = True) -> int:
    publisher = get_publisher()
    outcomes = command_intents_dispatch(
        intent_ids=intent_ids,
        publish_many=publisher.publish_many,
        trust_cache=trust_cache,
        connected=publisher.is_connected,
    )
    return sum(1 for o in outcomes.values() if o == DispatchOutcome.DISPATCHED)


# Device replies queued by an older bridge, like telemetry above.
@shared_task(name=DEVICE_MESSAGES_TASK, **routed_to("reconcile"), **DB_RETRY)
def device_messages_reconcile_task(messages: list[WireRow]) -> int:
    intent_ids = device_messages_record(messages=[DeviceMessage.from_task_arg(m) for m in messages])
    command_intents_reconcile(intent_ids=intent_ids)
    return len(intent_ids)


@shared_task(name="automation.command_intents_reconcile", **routed_to("reconcile"), **DB_RETRY)
def command_intents_reconcile_task(intent_ids: list[int]) -> int:
    command_intents_reconcile(intent_ids=intent_ids)
    return len(intent_ids)


@shared_task(name="automation.rule_schedules_ensure", **routed_to("scheduler"), **DB_RETRY)
def rule_schedules_ensure_task() -> int:
    """Extend every scheduled rule's occurrence rows to the horizon."""
    from automation.services.rule_schedules import rule_schedules_ensure_due

    return rule_schedules_ensure_due(now=timezone.now())


@shared_task(name="automation.watchdogs_sweep", **routed_to("scheduler"), **DB_RETRY)
def watchdogs_sweep_task() -> int:
    """Ensure a row per silence that lasted its watchdog's seconds and clear the alarms of
    endpoints that reported again; a poll of due work follows at once when rows were written,
    so a silence fires within one sweep, not one sweep plus one poll."""
    from automation.services.watchdog import watchdogs_sweep

    result = watchdogs_sweep(now=timezone.now())
    if result.ensured:
        enqueue(SCHEDULER_POLL_DUE)
    return len(result.ensured)


@shared_task(name="automation.command_intents_sweep", **routed_to("dispatch"))
def command_intents_sweep_task() -> int:
    """Dispatch what is due (lost nudges, elapsed backoffs) and reconcile what is overdue
    (ack deadlines, applied windows). Bounded; safe when two beats run it at once."""
    if not coordination.lock_try("command-intents-sweep", settings.COMMAND_SWEEP_INTERVAL_S):
        return 0
    now = timezone.now()
    pending_older_than = now - timedelta(seconds=settings.DISPATCH_SWEEP_AFTER_S)
    due = command_intents_due(
        now=now, pending_older_than=pending_older_than, limit=settings.SWEEP_BATCH_SIZE
    )
    for chunk in _chunks(due, 50):
        dispatch_without_cache(chunk)
    overdue = command_intents_overdue(now=now, limit=settings.SWEEP_BATCH_SIZE)
    for chunk in _chunks(overdue, 50):
        enqueue_ids(command_intents_reconcile_task, chunk)
    return len(due) + len(overdue)


def dispatch_without_cache(intent_ids: list[int]) -> None:
    """Sweep-driven dispatch ignores the cache's inflight markers: the database decides."""
    enqueue(COMMANDS_DISPATCH, intent_ids, trust_cache=False)


from scheduler import tasks as scheduler_tasks  # noqa: E402, F401 (registers them)
