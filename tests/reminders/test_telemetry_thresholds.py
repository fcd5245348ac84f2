"""Telemetry to threshold reminder without a reconciliation pass: the evaluate stage hands
the endpoints it saw to the metric sources over them, and sends nothing for endpoints no
active source reads (a fleet without threshold reminders pays no task per batch)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from celery.signals import before_task_publish

from automation.services.ingest import telemetry_ingest
from automation.tasks import endpoint_events_evaluate_task
from config.celery import app as celery_app
from devices.mqtt.messages import InboundTelemetry
from reminders.models import EndpointMetricSource
from tests.reminders.conftest import NOW, rows_of
from tests.reminders.test_thresholds import T0, silo_source, threshold_setting

pytestmark = pytest.mark.django_db


@pytest.fixture
def eager() -> object:
    celery_app.conf.task_always_eager = True
    yield
    celery_app.conf.task_always_eager = False


def test_a_reading_over_the_threshold_ensures_the_reminder_row(kit, bus, eager) -> None:
    with bus.commit():
        threshold_setting(kit.farm, "OncePerThreshold")
        source = silo_source(kit, now=T0)
    payload = json.dumps({"ts": NOW.isoformat(), "values": {"temp": 93}})
    with bus.commit():
        ids = telemetry_ingest(
            messages=[InboundTelemetry(kit.sensor.serial_number, payload, NOW)]
        ).pending_event_ids
    assert rows_of(source.guid) == []
    with bus.commit():
        endpoint_events_evaluate_task(ids)
    rows = rows_of(source.guid)
    assert [r.status for r in rows] == ["pending"]


@pytest.fixture
def published() -> Iterator[list[str]]:
    names: list[str] = []

    def record(sender: Any = None, **_: Any) -> None:
        names.append(str(sender))

    before_task_publish.connect(record, weak=False)
    yield names
    before_task_publish.disconnect(record)


def _reading(kit: Any, temp: int) -> list[int]:
    payload = json.dumps({"ts": NOW.isoformat(), "values": {"temp": temp}})
    return telemetry_ingest(
        messages=[InboundTelemetry(kit.sensor.serial_number, payload, NOW)]
    ).pending_event_ids


def test_a_reading_no_active_source_reads_sends_no_threshold_task(
    kit, bus, published: list[str]
) -> None:
    metrics = "reminders.endpoint_metrics_touched"
    with bus.commit():
        endpoint_events_evaluate_task(_reading(kit, 93))
    assert metrics not in published  # no source at all
    with bus.commit():
        source = silo_source(kit, now=T0)
    with bus.commit():
        endpoint_events_evaluate_task(_reading(kit, 94))
    assert published.count(metrics) == 1
    EndpointMetricSource.objects.filter(pk=source.pk).update(active=False)
    with bus.commit():
        endpoint_events_evaluate_task(_reading(kit, 95))
    assert published.count(metrics) == 1  # an inactive source reads nothing
