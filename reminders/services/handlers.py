"""Entry points of the event path: what the event handlers (and, later, the ingest stage)
call. Each reloads the source and runs the one source flow; none sends anything."""

from __future__ import annotations

import uuid
from datetime import datetime

from reminders.models import EndpointMetricSource, SourceType
from reminders.services.sync import SyncResult, reminder_source_sync


def reminder_source_changed(
    *, source_type: str, source_guid: uuid.UUID | str, now: datetime
) -> SyncResult:
    """A source changed (created, moved, deactivated, deleted): re-derive its rows."""
    return reminder_source_sync(
        source_type=source_type, source_guid=uuid.UUID(str(source_guid)), now=now
    )


def endpoint_metric_evaluate(*, source_id: int, now: datetime) -> SyncResult | None:
    """Evaluate one metric source at ``now`` (its endpoint's values up to then): ensure the
    occurrence its firing policy wants while the threshold holds, deactivate pending rows
    once it no longer does. Idempotent; the reconciliation pass calls it for sources with new
    telemetry, and the ingest stage may call it per touched endpoint. None: no such source."""
    guid = EndpointMetricSource.objects.filter(pk=source_id).values_list("guid", flat=True).first()
    if guid is None:
        return None
    return reminder_source_sync(source_type=SourceType.ENDPOINT_METRIC, source_guid=guid, now=now)


def endpoint_metric_sources_of_endpoints(endpoint_ids: list[int]) -> list[int]:
    """The active metric sources over any of these endpoints (one query per batch)."""
    rows = EndpointMetricSource.objects.filter(endpoint_id__in=endpoint_ids, active=True)
    return list(rows.order_by("pk").values_list("pk", flat=True))


def endpoint_metric_sources_of_endpoint(endpoint_id: int) -> list[int]:
    """The active metric sources over one endpoint (what ingest would evaluate)."""
    rows = EndpointMetricSource.objects.filter(endpoint_id=endpoint_id, active=True)
    return list(rows.order_by("pk").values_list("pk", flat=True))
