"""The reminder flow for one source (docs/spec.md §5): load the source, resolve the farm's zone,
load the settings that select it, deactivate the rows nobody wants any more *first*, then ensure
the wanted rows (and the immediate ones). Event handlers, setting changes and bounded
reconciliation all come through here, so every path builds the same keys with the same helpers
(``scheduler.keys``) and the same candidates.

One setting that cannot compute its occurrences (a row written before its fields were bounded,
a farm zone that does not load) stops only itself: its planning is rolled back to a savepoint,
logged as ``REMINDER_SETTING_FAILED`` and listed in the result, its open rows are left as they
are, and every other setting of the source proceeds."""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta

from django.db import DataError, transaction

from common.localtime import local_today
from reminders.models import ReminderOccurrence, ReminderSetting
from reminders.providers.base import (
    Candidate,
    ReminderProvider,
    SourceState,
    reminder_providers_for,
)
from reminders.selectors import (
    occurrences_of_source,
    occurrences_open,
    reminder_settings_for_source,
)
from scheduler.services import (
    EnsureOutcome,
    EnsureResult,
    scheduler_deactivate_by_key,
    scheduler_ensure,
)

logger = logging.getLogger(__name__)

DEACTIVATED = "deactivated"
# What a bad row can raise while its occurrences are computed (date and zone arithmetic,
# decimal thresholds, a value the database refuses); anything else still fails the sync.
SETTING_ROW_ERRORS = (ArithmeticError, LookupError, ValueError, TypeError, DataError)
_LINK_CURRENT = {
    EnsureOutcome.UNCHANGED,
    EnsureOutcome.ALREADY_COMPLETED,
    EnsureOutcome.IN_PROGRESS,
    EnsureOutcome.CONFLICT,
}


@dataclass(frozen=True)
class OccurrenceChange:
    """What happened to one scheduler row: an ensure outcome, or ``deactivated``."""

    scheduler_key: str
    action: str
    reason: str = ""
    local_date: date | None = None


@dataclass(frozen=True)
class SettingFailure:
    """A setting whose occurrences could not be computed for this source."""

    setting_guid: uuid.UUID
    error: str


@dataclass
class SyncResult:
    source_type: str
    source_guid: uuid.UUID
    farm_id: int | None = None
    changes: list[OccurrenceChange] = field(default_factory=list)
    failures: list[SettingFailure] = field(default_factory=list)

    @property
    def repaired(self) -> list[OccurrenceChange]:
        """Changes that wrote something (not the ones that found the row as wanted)."""
        quiet = {
            EnsureOutcome.UNCHANGED,
            EnsureOutcome.ALREADY_COMPLETED,
            EnsureOutcome.IN_PROGRESS,
        }
        return [c for c in self.changes if c.action not in quiet]


@dataclass(frozen=True)
class _SourcePlan:
    wanted: dict[str, Candidate]
    ensure: list[tuple[ReminderSetting, Candidate]]
    failed: dict[int, SettingFailure] = field(default_factory=dict)  # by setting id


def reminder_source_sync(
    *,
    source_type: str,
    source_guid: uuid.UUID,
    now: datetime,
    window_days: int | None = None,
) -> SyncResult:
    """Bring one source's scheduler rows in line with its settings, in one transaction.
    ``window_days`` (reconciliation) limits every write to occurrences dated from the farm's
    today to today + N; nothing outside it is written."""
    provider = reminder_providers_for(source_type)
    result = SyncResult(source_type, source_guid)
    with transaction.atomic():
        source = provider.load(source_guid, now=now)
        result.farm_id = source.farm_id if source else None
        plan = _candidates_by_setting(provider, source, now)
        result.failures += plan.failed.values()
        bounds = _bounds(source, now, window_days)
        result.changes += _deactivate_stale(
            provider, source_type, source_guid, source, plan, now, bounds
        )
        result.changes += _ensure(plan, source, now, bounds)
    return result


def _candidates_by_setting(
    provider: ReminderProvider, source: SourceState | None, now: datetime
) -> _SourcePlan:
    """Candidates per selecting setting; the live ones (today or later) and the immediate
    ones are ensured, the past ones stay wanted so their open rows are left alone."""
    if source is None or not source.active:
        return _SourcePlan({}, [])
    today = local_today(now, source.time_zone)
    wanted: dict[str, Candidate] = {}
    ensure: list[tuple[ReminderSetting, Candidate]] = []
    failed: dict[int, SettingFailure] = {}
    for setting in reminder_settings_for_source(source, provider):
        try:
            with transaction.atomic():  # a failing setting's writes (threshold state) roll back
                candidates = provider.candidates(setting=setting, source=source, now=now)
                extra = provider.immediate(source=source, candidates=candidates, now=now)
        except SETTING_ROW_ERRORS as exc:
            failed[setting.pk] = _setting_failed(setting, source, exc)
            continue
        wanted |= {c.key_text: c for c in candidates}
        live = [c for c in candidates if c.scheduled_local_date >= today]
        seen = {c.key_text for c in live}
        ensure += [(setting, c) for c in live + [e for e in extra if e.key_text not in seen]]
        wanted |= {c.key_text: c for c in extra}
    return _SourcePlan(wanted, ensure, failed)


def _setting_failed(
    setting: ReminderSetting, source: SourceState, exc: Exception
) -> SettingFailure:
    failure = SettingFailure(setting.guid, f"{type(exc).__name__}: {exc}"[:300])
    logger.error(
        "REMINDER_SETTING_FAILED setting=%s source_type=%s source=%s error=%s",
        setting.guid,
        source.source_type,
        source.guid,
        failure.error,
        extra={
            "settingId": str(setting.guid),
            "sourceType": source.source_type,
            "sourceId": str(source.guid),
            "farmId": source.farm_id,
            "error": failure.error,
        },
    )
    return failure


def _bounds(
    source: SourceState | None, now: datetime, window_days: int | None
) -> tuple[date, date] | None:
    if window_days is None:
        return None
    today = local_today(now, source.time_zone if source else "UTC")
    return today, today + timedelta(days=window_days)


def _inside(day: date | None, bounds: tuple[date, date] | None) -> bool:
    return bounds is None or (day is not None and bounds[0] <= day <= bounds[1])


def _deactivate_stale(
    provider: ReminderProvider,
    source_type: str,
    source_guid: uuid.UUID,
    source: SourceState | None,
    plan: _SourcePlan,
    now: datetime,
    bounds: tuple[date, date] | None,
) -> list[OccurrenceChange]:
    changes = []
    for link in occurrences_open(occurrences_of_source(source_type, source_guid)):
        if link.scheduler_key in plan.wanted or not _inside(link.scheduled_local_date, bounds):
            continue
        if link.setting_id in plan.failed:  # unknown what it wants now: left as it is
            continue
        reason = provider.stale_reason(occurrence=link, setting=link.setting, source=source)
        if scheduler_deactivate_by_key(scheduler_key=link.scheduler_key, reason=reason, now=now):
            changes.append(
                OccurrenceChange(link.scheduler_key, DEACTIVATED, reason, link.scheduled_local_date)
            )
    return changes


def _ensure(
    plan: _SourcePlan, source: SourceState | None, now: datetime, bounds: tuple[date, date] | None
) -> list[OccurrenceChange]:
    changes = []
    for setting, candidate in plan.ensure:
        if source is None or not _inside(candidate.scheduled_local_date, bounds):
            continue
        result = scheduler_ensure(
            key=candidate.key,
            scheduled_on=candidate.scheduled_on,
            input_hash=candidate.input_hash,
            time_zone_id=candidate.time_zone_id,
            scheduled_local_date=candidate.scheduled_local_date,
            trigger_type=candidate.trigger_type,
            farm_id=source.farm_id,
            now=now,
        )
        occurrence_link(setting=setting, source=source, candidate=candidate, result=result, now=now)
        changes.append(
            OccurrenceChange(
                candidate.key_text, result.outcome, local_date=candidate.scheduled_local_date
            )
        )
    return changes


def occurrence_link(
    *,
    setting: ReminderSetting,
    source: SourceState,
    candidate: Candidate,
    result: EnsureResult,
    now: datetime,
) -> None:
    """Record (or refresh) which setting and source wanted the row, and how its instant was
    derived; nothing is written when the row was found exactly as wanted."""
    if (
        result.outcome in _LINK_CURRENT
        and ReminderOccurrence.objects.filter(scheduler_key=candidate.key_text).exists()
    ):
        return
    values = {
        "scheduler_id": result.scheduler_id,
        "setting": setting,
        "farm_id": source.farm_id,
        "source_type": source.source_type,
        "source_guid": source.guid,
        "trigger_type": candidate.trigger_type,
        "target_date": candidate.target_date,
        "offset_days": candidate.offset_days,
        "threshold_key": candidate.threshold_key,
        "scheduled_on": candidate.scheduled_on,
        "scheduled_local_date": candidate.scheduled_local_date,
        "local_time_rule": candidate.local_time_rule,
        "updated_at": now,
    }
    ReminderOccurrence.objects.update_or_create(
        scheduler_key=candidate.key_text,
        defaults=values,
        create_defaults={**values, "created_at": now},
    )
