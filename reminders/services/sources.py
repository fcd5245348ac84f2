"""Writes of reminder sources. Each change publishes its domain event after commit
(``DocumentChanged``, ``EndpointMetricChanged``); reminders follow through the event bus,
never through a direct call, so the same handler serves every producer."""

from __future__ import annotations

from collections.abc import Callable
from datetime import date, datetime
from typing import Any, Literal, TypeVar

from django.db import transaction
from django.utils import timezone

from common.validators import DATE_MAX, DATE_MIN
from common.writes import row_create
from devices.models import DeviceInstanceEndpoint
from events.event_types import DOCUMENT_CHANGED, DocumentChangedPayload
from events.services import event_publish
from reminders.event_types import ENDPOINT_METRIC_CHANGED, EndpointMetricChangedPayload
from reminders.models import (
    METRIC_WINDOW_MAX_MINUTES,
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
    return row_create(
        doc, validate=_document_validate, then=lambda d: _document_publish(d, "created", now)
    )


def document_update(*, document_id: int, now: datetime | None = None, **changes: Any) -> Document:
    """Change fields of a document; publishes only when something changed."""
    return _source_update(
        Document, document_id, DOCUMENT_FIELDS, "a document", _document_validate,
        _document_publish, now, changes,
    )  # fmt: skip


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
    if doc.expires_on is not None and not DATE_MIN <= doc.expires_on <= DATE_MAX:
        raise SourceInvalid(f"expires_on must lie between {DATE_MIN} and {DATE_MAX}")


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
    return row_create(
        source, validate=_metric_validate, then=lambda s: _metric_publish(s, "created", now)
    )


def endpoint_metric_source_update(
    *, source_id: int, now: datetime | None = None, **changes: Any
) -> EndpointMetricSource:
    return _source_update(
        EndpointMetricSource, source_id, METRIC_FIELDS, "a metric source", _metric_validate,
        _metric_publish, now, changes,
    )  # fmt: skip


_Source = TypeVar("_Source", Document, EndpointMetricSource)


def _source_update(
    model: type[_Source],
    pk: int,
    editable: frozenset[str],
    label: str,
    validate: Callable[[_Source], None],
    publish: Callable[[_Source, Change, datetime], None],
    now: datetime | None,
    changes: dict[str, Any],
) -> _Source:
    """Lock the source, apply the changed fields, validate, bump its revision and publish
    (``deleted`` once inactive); nothing is written or published when nothing changed."""
    unknown = set(changes) - editable
    if unknown:
        raise SourceInvalid(f"not editable on {label}: {', '.join(sorted(unknown))}")
    now = now or timezone.now()
    with transaction.atomic():
        source = model.objects.select_for_update().get(pk=pk)
        changed: list[str] = [
            name for name, value in changes.items() if getattr(source, name) != value
        ]
        if not changed:
            return source
        for name in changed:
            setattr(source, name, changes[name])
        validate(source)
        source.updated_at, source.revision = now, source.revision + 1
        source.save(update_fields=[*changed, "updated_at", "revision"])
        publish(source, "updated" if source.active else "deleted", now)
    return source


def _metric_validate(source: EndpointMetricSource) -> None:
    MetricAggregate(source.aggregate)
    endpoint = DeviceInstanceEndpoint.objects.select_related("device").get(pk=source.endpoint_id)
    if endpoint.device.farm_id != source.farm_id:
        raise SourceInvalid("the endpoint belongs to another farm")
    if not 1 <= source.window_minutes <= METRIC_WINDOW_MAX_MINUTES:
        raise SourceInvalid(f"window_minutes must be from 1 to {METRIC_WINDOW_MAX_MINUTES}")


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
