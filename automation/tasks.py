"""Celery tasks of the execution core: adapters that take ids, call one service and own
retries only. Each service hands its next stages on itself, after its commit
(``automation.services.spine``); beat's sweeps re-derive all pending work from SQL, so a lost
message only delays it.
"""

from __future__ import annotations

import logging

from celery import shared_task
from django.utils import timezone

from automation.services.dispatch import commands_dispatch_via_publisher
from automation.services.edge import replies_accept
from automation.services.evaluate import events_evaluate
from automation.services.ingest import telemetry_accept
from automation.services.reconcile import commands_reconcile
from automation.services.sweeps import commands_sweep, events_sweep
from config.celery import DB_RETRY, previous_names_register, routed_to
from config.task_names import (
    COMMANDS_DISPATCH,
    COMMANDS_RECONCILE,
    COMMANDS_SWEEP,
    DEVICE_MESSAGES_RECONCILE,
    EVENTS_EVALUATE,
    EVENTS_SWEEP,
    RULE_SCHEDULES_ENSURE,
    TELEMETRY_INGEST,
    WATCHDOGS_SWEEP,
)
from devices.mqtt.messages import (
    DeviceMessage,
    InboundTelemetry,
    WireRow,
)

logger = logging.getLogger(__name__)


# Batches an older bridge queued before the upgrade, by the names it sent them under
# (``devices.mqtt.messages``); the bridge now commits what it receives itself
# (``automation.services.edge``) and sends only ids.
@shared_task(name=TELEMETRY_INGEST, **routed_to("ingest"), **DB_RETRY)
def telemetry_ingest_task(messages: list[WireRow]) -> int:
    return telemetry_accept(messages=[InboundTelemetry.from_task_arg(m) for m in messages]).events


@shared_task(name=DEVICE_MESSAGES_RECONCILE, **routed_to("reconcile"), **DB_RETRY)
def device_messages_reconcile_task(messages: list[WireRow]) -> int:
    return replies_accept(messages=[DeviceMessage.from_task_arg(m) for m in messages])


@shared_task(name=EVENTS_EVALUATE, **routed_to("evaluate"), **DB_RETRY)
def endpoint_events_evaluate_task(event_ids: list[int]) -> int:
    return events_evaluate(event_ids=event_ids).executions


@shared_task(name=EVENTS_SWEEP, **routed_to("evaluate"))
def endpoint_events_sweep_task() -> int:
    return events_sweep(now=timezone.now())


@shared_task(name=COMMANDS_DISPATCH, **routed_to("dispatch"), **DB_RETRY)
def commands_dispatch_task(command_ids: list[int], trust_cache: bool = True) -> int:
    return commands_dispatch_via_publisher(command_ids=command_ids, trust_cache=trust_cache)


@shared_task(name=COMMANDS_RECONCILE, **routed_to("reconcile"), **DB_RETRY)
def commands_reconcile_task(command_ids: list[int]) -> int:
    return len(commands_reconcile(command_ids=command_ids))


@shared_task(name=RULE_SCHEDULES_ENSURE, **routed_to("scheduler"), **DB_RETRY)
def rule_schedules_ensure_task() -> int:
    """Extend every scheduled rule's occurrence rows to the horizon."""
    from automation.services.rule_schedules import rule_schedules_ensure_due

    return rule_schedules_ensure_due(now=timezone.now())


@shared_task(name=WATCHDOGS_SWEEP, **routed_to("scheduler"), **DB_RETRY)
def watchdogs_sweep_task() -> int:
    """Ensure a row per silence that lasted its watchdog's seconds and clear the alarms of
    endpoints that reported again."""
    from automation.services.watchdog import watchdogs_sweep

    return len(watchdogs_sweep(now=timezone.now()).ensured)


@shared_task(name=COMMANDS_SWEEP, **routed_to("dispatch"))
def commands_sweep_task() -> int:
    return commands_sweep(now=timezone.now())


# Their names in earlier releases run them too, for one release
# (``config.task_names.PREVIOUS_TASK_NAMES``).
previous_names_register(
    telemetry_ingest_task, commands_dispatch_task, commands_reconcile_task, commands_sweep_task
)


from scheduler import tasks as scheduler_tasks  # noqa: E402, F401 (registers them)
