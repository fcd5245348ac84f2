"""Writes of reminder sources. Each change publishes its domain event after commit
(``DocumentChanged``, ``EndpointMetricChanged``); reminders follow through the event bus,
never through a direct call, so the same handler serves every producer."""

from __future__ import annotations

from datetime import date, datetime
from typing import Any, Literal

from django.db import transaction
from django.utils import timezone

from devices.models import DeviceInstanceEndpoint
from events.event_types import DOCUMENT_CHANGED, DocumentChangedPayload
from events.services import event_publish
from reminders.event_types import ENDPOINT_METRIC_CHANGED, EndpointMetricChangedPayload
from reminders.models import (
    Document,
    DocumentSubject,
    DocumentType,
    EndpointMetricSource,
    MetricAggregate,
)

Change = Literal["created", "updated", "deleted"]
DOCUMENT_FIELDS = frozenset(
    {"subject_kind", "device_id", "worker_name", "document_type", "title", "expires_on", "active"}
)
METRIC_FIELDS = frozenset({"metric_key", "aggregate", "window_minutes", "active", "endpoint_id"})


class SourceInvalid(ValueError):
    """A source write that would leave it inconsistent (refused before anything is saved)."""


def document_create(
    *,
    farm_id: int,
    subject_kind: str,
    document_type: str,
    title: str,
    expires_on: date | None,
    device_id: int | None = None,
    worker_name: str = "",
    now: datetime | None = None,
) -> Document:
    now = now or timezone.now()
    doc = Document(
        farm_id=farm_id,
        subject_kind=subject_kind,
        device_id=device_id,
        worker_name=worker_name,
        document_type=document_type,
        title=title,
        expires_on=expires_on,
        created_at=now,
        updated_at=now,
    )
    _document_validate(doc)
    with transaction.atomic():
        doc.save()
        _document_publish(doc, "created", now)
    return doc


def document_update(*, document_id: int, now: datetime | None = None, **changes: Any) -> Document:
    """Change fields of a document; publishes only when something changed."""
    unknown = set(changes) - DOCUMENT_FIELDS
    if unknown:
        raise SourceInvalid(f"not editable on a document: {', '.join(sorted(unknown))}")
    now = now or timezone.now()
    with transaction.atomic():
        doc = Document.objects.select_for_update().get(pk=document_id)
        changed = [name for name, value in changes.items() if getattr(doc, name) != value]
        if not changed:
            return doc
        for name in changed:
            setattr(doc, name, changes[name])
        _document_validate(doc)
        doc.updated_at, doc.revision = now, doc.revision + 1
        doc.save(update_fields=[*changed, "updated_at", "revision"])
        _document_publish(doc, "updated" if doc.active else "deleted", now)
    return doc


def document_deactivate(*, document_id: int, now: datetime | None = None) -> Document:
    """A document no longer tracked (replaced, withdrawn): its pending reminders stop."""
    return document_update(document_id=document_id, now=now, active=False)


def _document_validate(doc: Document) -> None:
    DocumentSubject(doc.subject_kind)
    DocumentType(doc.document_type)
    if doc.subject_kind == DocumentSubject.DEVICE and (
        doc.device is None or doc.device.farm_id != doc.farm_id
    ):
        raise SourceInvalid("a device document needs a device of the same farm")
    if doc.subject_kind == DocumentSubject.WORKER and not doc.worker_name.strip():
        raise SourceInvalid("a worker document needs the worker's name")


def _document_publish(doc: Document, change: Change, now: datetime) -> None:
    event_publish(
        DOCUMENT_CHANGED,
        idempotency_key=f"document:{doc.guid}:r{doc.revision}",
        payload=DocumentChangedPayload(
            document_id=str(doc.guid),
            farm_id=doc.farm_id,
            document_type=doc.document_type,
            expires_on=doc.expires_on.isoformat() if doc.expires_on else None,
            change=change,
        ),
        occurred_at=now,
    )


def endpoint_metric_source_create(
    *,
    farm_id: int,
    endpoint_id: int,
    metric_key: str,
    aggregate: str,
    window_minutes: int = 60,
    now: datetime | None = None,
) -> EndpointMetricSource:
    now = now or timezone.now()
    source = EndpointMetricSource(
        farm_id=farm_id,
        endpoint_id=endpoint_id,
        metric_key=metric_key,
        aggregate=aggregate,
        window_minutes=window_minutes,
        created_at=now,
        updated_at=now,
    )
    _metric_validate(source)
    with transaction.atomic():
        source.save()
        _metric_publish(source, "created", now)
    return source


def endpoint_metric_source_update(
    *, source_id: int, now: datetime | None = None, **changes: Any
) -> EndpointMetricSource:
    unknown = set(changes) - METRIC_FIELDS
    if unknown:
        raise SourceInvalid(f"not editable on a metric source: {', '.join(sorted(unknown))}")
    now = now or timezone.now()
    with transaction.atomic():
        source = EndpointMetricSource.objects.select_for_update().get(pk=source_id)
        changed = [name for name, value in changes.items() if getattr(source, name) != value]
        if not changed:
            return source
        for name in changed:
            setattr(source, name, changes[name])
        _metric_validate(source)
        source.updated_at, source.revision = now, source.revision + 1
        source.save(update_fields=[*changed, "updated_at", "revision"])
        _metric_publish(source, "updated" if source.active else "deleted", now)
    return source


def _metric_validate(source: EndpointMetricSource) -> None:
    MetricAggregate(source.aggregate)
    endpoint = DeviceInstanceEndpoint.objects.select_related("device").get(pk=source.endpoint_id)
    if endpoint.device.farm_id != source.farm_id:
        raise SourceInvalid("the endpoint belongs to another farm")
    if source.window_minutes < 1:
        raise SourceInvalid("window_minutes must be at least 1")


def _metric_publish(source: EndpointMetricSource, change: Change, now: datetime) -> None:
    event_publish(
        ENDPOINT_METRIC_CHANGED,
        idempotency_key=f"endpoint-metric:{source.guid}:r{source.revision}",
        payload=EndpointMetricChangedPayload(
            source_id=str(source.guid),
            farm_id=source.farm_id,
            metric_key=source.metric_key,
            change=change,
        ),
        occurred_at=now,
    )
