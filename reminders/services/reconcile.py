"""Bounded reconciliation per provider (docs/spec.md §5: no outbox; the source event is primary).

One pass is one batch of two scans, both through the same source flow (and so the same key
helpers) as the event path, and both writing only occurrences dated from the farm's today to
today + N:

* the *changed* scan: active sources of the allowlisted farms changed after the watermark
  ``(changed_since, cursor_id)`` and before ``now − settle`` (a commit still in flight is not
  skipped), in (updated_at, id) order — repairs what a lost event left behind;
* the *window* scan: active sources whose occurrences fall in the due window (for metric
  sources: whose endpoint reported since the last pass), by id from its own cursor, wrapping
  when done — repairs rows that only now enter the window.

The batch runs in one transaction with the watermark update: the watermark advances only when
the batch succeeded. ``dry_run`` runs the same pass and rolls it back. Rows outside the
window, sources outside the allowlist and inactive sources are never touched (execution-time
revalidation deactivates stale rows that reconciliation does not reach).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from django.conf import settings
from django.db import transaction

from reminders.models import ReconciliationWatermark
from reminders.providers.base import (
    ChangedScan,
    ReminderProvider,
    SourceRef,
    WindowScan,
    reminder_providers_for,
    reminder_source_types,
)
from reminders.services.sync import SyncResult, reminder_source_sync

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Repair:
    scan: str  # "changed" or "window"
    farm_id: int | None
    source_guid: str
    scheduler_key: str
    action: str
    reason: str


@dataclass
class ReconcileReport:
    provider: str
    scope: str
    dry_run: bool
    window_days: int
    visited_changed: int = 0
    visited_window: int = 0
    repairs: list[Repair] = field(default_factory=list)
    watermark: tuple[datetime, int] | None = None  # (changed_since, cursor_id) afterwards


class _RollBack(Exception):
    """Raised inside a dry run's transaction so nothing it did is kept."""

    def __init__(self, report: ReconcileReport) -> None:
        super().__init__("dry run")
        self.report = report


class ReconcileFailed(RuntimeError):
    """A provider's pass failed (logged); the others ran, and the task is retried."""


def reminders_reconcile(*, provider: str | None = None, now: datetime) -> int:
    """One bounded pass per provider (or of ``provider``); how many rows it repaired. One
    provider's failure does not starve the others: it is logged, and raised at the end."""
    repaired, failed = 0, []
    for name in [provider] if provider else reminder_source_types():
        try:
            repaired += len(reminder_reconcile(provider=name, now=now).repairs)
        except Exception:
            logger.exception("reminder reconciliation of %s failed", name)
            failed.append(name)
    if failed:
        raise ReconcileFailed(f"reconciliation failed for {', '.join(failed)}")
    return repaired


def reminder_reconcile(
    *,
    provider: str,
    now: datetime,
    farm_ids: Sequence[int] | None = None,
    dry_run: bool = False,
    batch_size: int | None = None,
    window_days: int | None = None,
) -> ReconcileReport:
    """One bounded pass of ``provider``'s reconciliation; what it repaired (or would)."""
    found = reminder_providers_for(provider)
    allow = list(farm_ids) if farm_ids else list(settings.REMINDERS_RECONCILE_FARM_IDS) or None
    report = ReconcileReport(
        provider=provider,
        scope="all" if allow is None else ",".join(str(f) for f in sorted(allow)),
        dry_run=dry_run,
        window_days=settings.REMINDERS_RECONCILE_WINDOW_DAYS
        if window_days is None
        else window_days,
    )
    batch = batch_size or settings.REMINDERS_RECONCILE_BATCH
    try:
        with transaction.atomic():
            _pass(found, report, allow, batch, now)
            if dry_run:
                raise _RollBack(report)
    except _RollBack as rolled:
        return rolled.report
    return report


def _pass(
    provider: ReminderProvider,
    report: ReconcileReport,
    allow: list[int] | None,
    batch: int,
    now: datetime,
) -> None:
    mark = _watermark(report.provider, report.scope, now)
    since = mark.changed_since
    changed = provider.changed(
        ChangedScan(
            since=since,
            cursor_id=mark.cursor_id,
            until=now - timedelta(seconds=settings.REMINDERS_RECONCILE_SETTLE_S),
            farm_ids=allow,
            limit=batch,
        )
    )
    report.visited_changed = len(changed)
    done = _repair(provider, report, "changed", changed, now, set())
    if changed:
        mark.changed_since, mark.cursor_id = changed[-1].updated_at, changed[-1].pk
    today = now.astimezone(UTC).date()
    in_window = provider.in_window(
        WindowScan(
            # One day of slack each side covers every farm zone; each farm's own
            # today..today+N is applied when its occurrences are written.
            first=today - timedelta(days=1),
            last=today + timedelta(days=report.window_days + 1),
            since=mark.last_run_at or since,
            farm_ids=allow,
            after_id=mark.window_cursor_id,
            limit=batch,
        )
    )
    report.visited_window = len(in_window)
    _repair(provider, report, "window", in_window, now, done)
    mark.window_cursor_id = in_window[-1].pk if len(in_window) == batch else 0
    mark.last_run_at = now
    mark.last_repaired = len(report.repairs)
    mark.save()
    report.watermark = (mark.changed_since, mark.cursor_id)


def _watermark(provider: str, scope: str, now: datetime) -> ReconciliationWatermark:
    lookback = timedelta(days=settings.REMINDERS_RECONCILE_LOOKBACK_DAYS)
    mark, _ = ReconciliationWatermark.objects.select_for_update().get_or_create(
        provider=provider, scope=scope, defaults={"changed_since": now - lookback}
    )
    return mark


def _repair(
    provider: ReminderProvider,
    report: ReconcileReport,
    scan: str,
    refs: list[SourceRef],
    now: datetime,
    done: set[str],
) -> set[str]:
    for ref in refs:
        if str(ref.guid) in done:
            continue
        result = reminder_source_sync(
            source_type=provider.source_type,
            source_guid=ref.guid,
            now=now,
            window_days=report.window_days,
        )
        done.add(str(ref.guid))
        report.repairs += _repairs(scan, result)
    return done


def _repairs(scan: str, result: SyncResult) -> list[Repair]:
    return [
        Repair(scan, result.farm_id, str(result.source_guid), c.scheduler_key, c.action, c.reason)
        for c in result.repaired
    ]
