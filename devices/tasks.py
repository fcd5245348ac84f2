"""Celery tasks of the devices app: call one service, own retries and time limits only."""

from __future__ import annotations

from celery import shared_task
from django.utils import timezone

from config.celery import DB_RETRY, routed_to
from config.task_names import DEVICES_OFFLINE_SWEEP, TELEMETRY_ROLLUPS_ADVANCE
from devices.services.health import devices_offline_sweep_due
from devices.services.rollups import telemetry_rollups_advance


# On the housekeeping queue with the other prunes, not ``ingest``: a run may take its whole
# budget, and an ingest worker's slot is worth a reading's latency to the rules.
@shared_task(
    name=TELEMETRY_ROLLUPS_ADVANCE,
    **routed_to("scheduler"),
    **DB_RETRY,
)
def telemetry_rollups_advance_task() -> int:
    """Telemetry stored since the last run into hourly rollups, in bounded batches (the next
    run takes any rest); the number of telemetry rows folded in."""
    return telemetry_rollups_advance().telemetry_rows


# Housekeeping queue: a sweep is one indexed read when nothing is due.
@shared_task(
    name=DEVICES_OFFLINE_SWEEP,
    **routed_to("scheduler"),
    **DB_RETRY,
)
def devices_offline_sweep_task() -> int:
    """The devices silent past their offline window moved offline; how many went offline."""
    return len(devices_offline_sweep_due(now=timezone.now()))
