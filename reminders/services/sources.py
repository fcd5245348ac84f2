"""Writes of reminder sources. Each change publishes its domain event after commit
(``DocumentChanged``, ``EndpointMetricChanged``); reminders follow through the event bus,
never through a direct call, so the same handler serves every producer."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import date, datetime
from typing import Literal, NotRequired, TypedDict, TypeVar, Unpack

from django.utils import timezone

from common.validators import DATE_MAX, DATE_MIN
from devices.models import DeviceInstanceEndpoint
from events.event_types import DOCUMENT_CHANGED, DocumentChangedPayload
from reminders.event_types import ENDPOINT_METRIC_CHANGED, EndpointMetricChangedPayload
from reminders.models import (
    METRIC_WINDOW_MAX_MINUTES,
    Document,
    DocumentSubject,
    DocumentType,
    EndpointMetricSource,
    MetricAggregate,
)
from reminders.services.writes import RowWrites, revision_publish, stamp_revised

Change = Literal["created", "updated", "deleted"]
Source = TypeVar("Source", Document, EndpointMetricSource)


class DocumentChanges(TypedDict, total=False):
    subject_kind: str
    device_id: int | None
    worker_name: str
    document_type: str
    title: str
    expires_on: date | None
    active: bool


class DocumentNew(TypedDict):
    """A new document: a device's names its device, a worker's the worker."""

    farm_id: int
    subject_kind: str
    document_type: str
    title: str
    expires_on: date | None
    device_id: NotRequired[int | None]
    worker_name: NotRequired[str]


class MetricSourceChanges(TypedDict, total=False):
    metric_key: str
    aggregate: str
    window_minutes: int
    active: bool
    endpoint_id: int


class MetricSourceNew(TypedDict):
    farm_id: int
    endpoint_id: int
    metric_key: str
    aggregate: str
    window_minutes: NotRequired[int]  # 60 when not given


DOCUMENT_FIELDS = DocumentChanges.__optional_keys__
METRIC_FIELDS = MetricSourceChanges.__optional_keys__


class SourceInvalid(ValueError):
    """A source write that would leave it inconsistent (refused before anything is saved)."""


def document_create(*, now: datetime | None = None, **fields: Unpack[DocumentNew]) -> Document:
    now = now or timezone.now()
    return _DOCUMENTS.create(fields, now=now, then=lambda d: _document_publish(d, "created", now))


def document_update(
    *, document_id: int, now: datetime | None = None, **changes: Unpack[DocumentChanges]
) -> Document:
    """Change fields of a document; publishes only when something changed."""
    return _source_update(_DOCUMENTS, _document_publish, document_id, now, changes)


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


_DOCUMENTS = RowWrites(
    Document, DOCUMENT_FIELDS, SourceInvalid, _document_validate, stamp_revised, "a document"
)


def _document_publish(doc: Document, change: Change, now: datetime) -> None:
    expires_on = doc.expires_on.isoformat() if doc.expires_on else None
    payload = DocumentChangedPayload(
        document_id=str(doc.guid),
        farm_id=doc.farm_id,
        document_type=doc.document_type,
        expires_on=expires_on,
        change=change,
    )
    revision_publish(DOCUMENT_CHANGED, "document", doc, payload, now)


def endpoint_metric_source_create(
    *, now: datetime | None = None, **fields: Unpack[MetricSourceNew]
) -> EndpointMetricSource:
    now = now or timezone.now()
    return _METRICS.create(fields, now=now, then=lambda s: _metric_publish(s, "created", now))


def endpoint_metric_source_update(
    *, source_id: int, now: datetime | None = None, **changes: Unpack[MetricSourceChanges]
) -> EndpointMetricSource:
    return _source_update(_METRICS, _metric_publish, source_id, now, changes)


def _source_update(
    writes: RowWrites[Source],
    publish: Callable[[Source, Change, datetime], None],
    pk: int,
    now: datetime | None,
    changes: Mapping[str, object],
) -> Source:
    """Publishes ``updated``, or ``deleted`` once the source is inactive."""
    at = now or timezone.now()

    def then(source: Source, _: list[str]) -> None:
        publish(source, "updated" if source.active else "deleted", at)

    return writes.update(pk, changes, now=at, then=then)[0]


def _metric_validate(source: EndpointMetricSource) -> None:
    MetricAggregate(source.aggregate)
    endpoint = DeviceInstanceEndpoint.objects.select_related("device").get(pk=source.endpoint_id)
    if endpoint.device.farm_id != source.farm_id:
        raise SourceInvalid("the endpoint belongs to another farm")
    if not 1 <= source.window_minutes <= METRIC_WINDOW_MAX_MINUTES:
        raise SourceInvalid(f"window_minutes must be from 1 to {METRIC_WINDOW_MAX_MINUTES}")


_METRICS = RowWrites(
    EndpointMetricSource,
    METRIC_FIELDS,
    SourceInvalid,
    _metric_validate,
    stamp_revised,
    "a metric source",
)


def _metric_publish(source: EndpointMetricSource, change: Change, now: datetime) -> None:
    payload = EndpointMetricChangedPayload(
        source_id=str(source.guid),
        farm_id=source.farm_id,
        metric_key=source.metric_key,
        change=change,
    )
    revision_publish(ENDPOINT_METRIC_CHANGED, "endpoint-metric", source, payload, now)
