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


def endpoint_metrics_touched(*, endpoint_ids: list[int], now: datetime) -> int:
    """New telemetry arrived for these endpoints: evaluate every active metric source over
    them (one query finds them; each is then synced by guid). Rows changed."""
    guids = EndpointMetricSource.objects.filter(endpoint_id__in=endpoint_ids, active=True)
    changed = 0
    for guid in guids.order_by("pk").values_list("guid", flat=True):
        result = reminder_source_sync(
            source_type=SourceType.ENDPOINT_METRIC, source_guid=guid, now=now
        )
        changed += len(result.repaired)
    return changed
