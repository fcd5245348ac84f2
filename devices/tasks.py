"""Ingest stage: the bridge hands off batches of telemetry; evaluation follows after commit."""

from __future__ import annotations

from typing import Any

from celery import shared_task
from django.db import OperationalError

from devices.mqtt.messages import InboundTelemetry
from devices.services import telemetry_ingest


@shared_task(
    name="devices.telemetry_ingest",
    autoretry_for=(OperationalError,),
    retry_backoff=True,
    max_retries=5,
)
def telemetry_ingest_task(messages: list[list[Any]]) -> int:
    from automation.tasks import endpoint_events_enqueue

    result = telemetry_ingest(
        messages=[InboundTelemetry.from_task_arg(m) for m in messages],
        on_events=endpoint_events_enqueue,
    )
    return result.events
