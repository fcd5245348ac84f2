"""The seam of a reminder source type (docs/spec.md §5): one :class:`ReminderProvider` says how
its sources load, which settings select them, which occurrences its trigger wants, why a row
nobody wants is stale, and how reconciliation finds them. Providers are looked up by source
type in a registry, so adding a source type is adding a module under ``reminders/providers/``
that registers itself — no switch anywhere. Recipients, template and channels are the
setting's own, read when the row runs.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from datetime import date, datetime
from functools import cached_property
from typing import Any, Generic, Protocol, TypeVar

from django.db.models import Q, QuerySet

from common.localtime import LocalTimeRule
from common.registry import Registry
from reminders.models import Document, EndpointMetricSource, ReminderOccurrence, ReminderSetting
from scheduler.keys import (
    ReminderDateKey,
    ReminderThresholdKey,
    scheduler_input_hash,
    scheduler_key,
)
from scheduler.states import SchedulerReason


@dataclass(frozen=True)
class SourceState:
    """A source as loaded now: identity, the farm's zone, and the facts its triggers use."""

    source_type: str
    guid: uuid.UUID
    pk: int
    farm_id: int
    organization_id: int
    farm_name: str
    time_zone: str
    active: bool
    updated_at: datetime
    target_date: date | None = None  # date-based sources
    metric_value: float | None = None  # metric sources, evaluated at load time
    facts: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Candidate:
    """One occurrence a trigger wants: its key, its instant and the normalised input."""

    key: ReminderDateKey | ReminderThresholdKey
    trigger_type: str
    scheduled_on: datetime
    scheduled_local_date: date
    time_zone_id: str
    input: Mapping[str, Any]
    local_time_rule: str = LocalTimeRule.EXACT
    target_date: date | None = None
    offset_days: int | None = None
    threshold_key: str = ""

    @cached_property
    def key_text(self) -> str:
        return scheduler_key(self.key)

    @cached_property
    def input_hash(self) -> str:
        return scheduler_input_hash(dict(self.input))


@dataclass(frozen=True)
class SourceRef:
    """A source found by a reconciliation scan, with its cursor position."""

    guid: uuid.UUID
    pk: int
    updated_at: datetime


@dataclass(frozen=True)
class ChangedScan:
    """Active sources changed after (``since``, ``cursor_id``) and not after ``until``, in
    (updated_at, id) order: what a lost event left behind."""

    since: datetime
    cursor_id: int
    until: datetime
    farm_ids: Sequence[int] | None
    limit: int


@dataclass(frozen=True)
class WindowScan:
    """Active sources whose occurrences may fall in the due window [``first``, ``last``] (or,
    for sources without dates, whose inputs moved since ``since``), by id after ``after_id``:
    rows that only now enter the window."""

    first: date
    last: date
    since: datetime
    farm_ids: Sequence[int] | None
    after_id: int
    limit: int


class ReminderProvider(Protocol):
    """What one source type plugs in; the source flow, the executor and the reconciler call
    nothing else of it."""

    @property
    def source_type(self) -> str: ...

    @property
    def trigger_type(self) -> str:
        """The one trigger type its settings use."""

    def load(self, guid: uuid.UUID, *, now: datetime) -> SourceState | None:
        """The source as it is now (None when it no longer exists)."""

    def setting_applies(self, setting: ReminderSetting, source: SourceState) -> bool:
        """Whether a setting of this source type selects this source (type, metric...)."""

    def sources_for_setting(self, setting: ReminderSetting) -> list[uuid.UUID]:
        """Active sources in the setting's scope: what a setting change re-derives."""

    def context(
        self, *, setting: ReminderSetting, source: SourceState, candidate: Candidate
    ) -> dict[str, Any]:
        """Every variable the setting's templates use, reloaded at execution time."""

    def candidates(
        self, *, setting: ReminderSetting, source: SourceState, now: datetime
    ) -> list[Candidate]:
        """Every occurrence the setting wants for the source (may advance provider state,
        e.g. threshold episodes). Builds schedules only: no recipients, no rendering."""

    def expected(
        self, *, setting: ReminderSetting, source: SourceState, now: datetime
    ) -> list[Candidate]:
        """The same, read-only: what execution-time revalidation compares with."""

    def immediate(
        self, *, source: SourceState, candidates: Sequence[Candidate], now: datetime
    ) -> list[Candidate]:
        """Candidates to ensure now although their day has passed (they run at once)."""

    def stale_reason(
        self, occurrence: ReminderOccurrence, setting: ReminderSetting, source: SourceState | None
    ) -> SchedulerReason:
        """Why an open row nobody wants any more is deactivated (its reason code)."""

    def changed(self, scan: ChangedScan) -> list[SourceRef]: ...

    def in_window(self, scan: WindowScan) -> list[SourceRef]: ...


Row = TypeVar("Row", Document, EndpointMetricSource)


class SourceRows(Generic[Row]):
    """What the shipped providers share: their sources are rows of ``source_model`` (guid,
    farm, active, updated_at) that a setting selects within its farm or organisation, and
    the reconciler scans them by cursor."""

    source_type: str
    source_model: type[Row]

    def state(
        self,
        row: Row,
        *,
        active: bool,
        facts: Mapping[str, Any],
        target_date: date | None = None,
        metric_value: float | None = None,
    ) -> SourceState:
        """A loaded row (with its farm) as the flow sees it: its identity and its farm's zone."""
        return SourceState(
            source_type=self.source_type,
            guid=row.guid,
            pk=row.pk,
            farm_id=row.farm_id,
            organization_id=row.farm.organization_id,
            farm_name=row.farm.name,
            time_zone=row.farm.time_zone,
            active=active,
            updated_at=row.updated_at,
            target_date=target_date,
            metric_value=metric_value,
            facts=facts,
        )

    def setting_selects(self, setting: ReminderSetting) -> Q:
        """Which of the scope's rows the setting selects (its document type, its metric)."""
        return Q()

    def window_rows(self, scan: WindowScan) -> QuerySet[Row] | None:
        """The rows the window scan may visit (None: none at all)."""
        raise NotImplementedError

    def sources_for_setting(self, setting: ReminderSetting) -> list[uuid.UUID]:
        rows = self.source_model.objects.filter(active=True)
        if setting.farm_id is not None:
            rows = rows.filter(farm_id=setting.farm_id)
        elif setting.organization_id is not None:
            rows = rows.filter(farm__organization_id=setting.organization_id)
        else:
            return []
        rows = rows.filter(self.setting_selects(setting))
        return list(rows.order_by("id").values_list("guid", flat=True))

    def immediate(
        self, *, source: SourceState, candidates: Sequence[Candidate], now: datetime
    ) -> list[Candidate]:
        return []

    def changed(self, scan: ChangedScan) -> list[SourceRef]:
        rows = self.source_model.objects.filter(active=True, updated_at__lte=scan.until).filter(
            Q(updated_at__gt=scan.since) | Q(updated_at=scan.since, id__gt=scan.cursor_id)
        )
        return _refs(rows.order_by("updated_at", "id"), scan.farm_ids, scan.limit)

    def in_window(self, scan: WindowScan) -> list[SourceRef]:
        rows = self.window_rows(scan)
        if rows is None:
            return []
        rows = rows.filter(active=True, id__gt=scan.after_id)
        return _refs(rows.order_by("id"), scan.farm_ids, scan.limit)


def _refs(rows: QuerySet[Row], farm_ids: Sequence[int] | None, limit: int) -> list[SourceRef]:
    """A scan's ordered rows in the farm allowlist, at most ``limit``."""
    if farm_ids is not None:
        rows = rows.filter(farm_id__in=farm_ids)
    picked = rows.values_list("guid", "id", "updated_at")
    return [SourceRef(g, pk, at) for g, pk, at in picked[:limit]]


class UnknownSourceType(LookupError):
    """No provider is registered for a source type."""


# The same module imported again registers an equal provider: not a conflict.
_providers: Registry[ReminderProvider] = Registry(
    "reminder providers", same=lambda a, b: type(a) is type(b)
)


def reminder_providers_register(provider: ReminderProvider) -> None:
    """Register a source type's provider; registering the same type twice is a bug unless
    it is the same module imported again."""
    _providers.register(provider.source_type, provider)


def reminder_providers_for(source_type: str) -> ReminderProvider:
    found = _providers.get(source_type)
    if found is None:
        raise UnknownSourceType(f"no reminder providers for source type {source_type!r}")
    return found


def reminder_source_types() -> list[str]:
    return _providers.keys()


def reminder_providers_override(
    provider: ReminderProvider,
) -> AbstractContextManager[ReminderProvider]:
    """A source type's provider swapped in for a block (tests, tools)."""
    return _providers.override(provider.source_type, provider)
