"""Provider interfaces of a reminder source type (docs/spec.md §5: trigger, invalidation, immediate
notification, recipient and delivery policy) and the registry that routes by source type.

A source type is one :class:`ProviderSet`; the event handlers, the executor and the
reconciler look it up here, so adding a source type is adding a module under
``reminders/providers/`` that registers itself — no switch anywhere.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from datetime import date, datetime
from functools import cached_property
from typing import Any, Protocol

from django.db.models import Q, QuerySet

from common.localtime import LocalTimeRule
from common.registry import Registry
from reminders.models import ReminderOccurrence, ReminderSetting
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
class Delivery:
    template_name: str
    channels: tuple[str, ...]


@dataclass(frozen=True)
class SourceRef:
    """A source found by a reconciliation scan, with its cursor position."""

    guid: uuid.UUID
    pk: int
    updated_at: datetime


def sources_changed_since(
    rows: QuerySet[Any],
    *,
    since: datetime,
    cursor_id: int,
    until: datetime,
    farm_ids: Sequence[int] | None,
    limit: int,
) -> list[SourceRef]:
    """Active sources changed after the watermark (ties broken by the cursor id), in the
    farm allowlist, oldest first, at most ``limit``: every provider's bounded scan."""
    rows = rows.filter(active=True, updated_at__lte=until).filter(
        Q(updated_at__gt=since) | Q(updated_at=since, id__gt=cursor_id)
    )
    if farm_ids is not None:
        rows = rows.filter(farm_id__in=farm_ids)
    picked = rows.order_by("updated_at", "id").values_list("guid", "id", "updated_at")
    return [SourceRef(g, pk, at) for g, pk, at in picked[:limit]]


class ChangedSinceScan:
    """The reconciliation scan every provider shares: set ``source_model`` (a model with
    guid, farm, active and updated_at) and get ``changed`` for free."""

    source_model: type[Any]

    def changed(
        self,
        *,
        since: datetime,
        cursor_id: int,
        until: datetime,
        farm_ids: Sequence[int] | None,
        limit: int,
    ) -> list[SourceRef]:
        return sources_changed_since(
            self.source_model.objects.all(),
            since=since,
            cursor_id=cursor_id,
            until=until,
            farm_ids=farm_ids,
            limit=limit,
        )


class SourceProvider(Protocol):
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


class TriggerProvider(Protocol):
    def candidates(
        self, *, setting: ReminderSetting, source: SourceState, now: datetime
    ) -> list[Candidate]:
        """Every occurrence the setting wants for the source (may advance provider state,
        e.g. threshold episodes). Builds schedules only: no recipients, no rendering."""

    def expected(
        self, *, setting: ReminderSetting, source: SourceState, now: datetime
    ) -> list[Candidate]:
        """The same, read-only: what execution-time revalidation compares with."""


class InvalidationProvider(Protocol):
    def stale_reason(
        self,
        *,
        occurrence: ReminderOccurrence,
        setting: ReminderSetting | None,
        source: SourceState | None,
    ) -> SchedulerReason:
        """Why an open row nobody wants any more is deactivated (its reason code)."""


class ImmediateNotificationProvider(Protocol):
    def immediate(
        self,
        *,
        setting: ReminderSetting,
        source: SourceState,
        candidates: Sequence[Candidate],
        now: datetime,
    ) -> list[Candidate]:
        """Candidates to ensure now although their day has passed (they run at once)."""


class RecipientProvider(Protocol):
    def recipient_policy(self, *, setting: ReminderSetting, source: SourceState) -> str:
        """Who receives it, resolved at execution time (a policy name for notifications)."""


class DeliveryPolicy(Protocol):
    def delivery(self, *, setting: ReminderSetting, source: SourceState) -> Delivery:
        """Template and channels, resolved at execution time."""


class ReconcileProvider(Protocol):
    def changed(
        self,
        *,
        since: datetime,
        cursor_id: int,
        until: datetime,
        farm_ids: Sequence[int] | None,
        limit: int,
    ) -> list[SourceRef]:
        """Active sources changed after (since, cursor_id) and not after ``until``, in
        (updated_at, id) order: the changed-since scan."""

    def in_window(
        self,
        *,
        first: date,
        last: date,
        since: datetime,
        farm_ids: Sequence[int] | None,
        after_id: int,
        limit: int,
    ) -> list[SourceRef]:
        """Active sources whose occurrences may fall in the due window [first, last] (or,
        for sources without dates, whose inputs moved since ``since``), by id after
        ``after_id``: the due-window scan."""


class SettingRecipients:
    """The setting's recipients policy, read when the row runs."""

    def recipient_policy(self, *, setting: ReminderSetting, source: SourceState) -> str:
        return setting.recipients_policy


class SettingDelivery:
    """The setting's template and channels, read when the row runs."""

    def delivery(self, *, setting: ReminderSetting, source: SourceState) -> Delivery:
        return Delivery(setting.template_name, tuple(setting.channels))


class NoImmediate:
    def immediate(
        self,
        *,
        setting: ReminderSetting,
        source: SourceState,
        candidates: Sequence[Candidate],
        now: datetime,
    ) -> list[Candidate]:
        return []


@dataclass(frozen=True)
class ProviderSet:
    """Everything one source type plugs in, and the trigger type its settings use."""

    source_type: str
    trigger_type: str
    source: SourceProvider
    trigger: TriggerProvider
    invalidation: InvalidationProvider
    reconcile: ReconcileProvider
    immediate: ImmediateNotificationProvider = field(default_factory=NoImmediate)
    recipients: RecipientProvider = field(default_factory=SettingRecipients)
    delivery: DeliveryPolicy = field(default_factory=SettingDelivery)


class UnknownSourceType(LookupError):
    """No provider set is registered for a source type."""


# The same module imported again registers an equal set: not a conflict.
_providers: Registry[ProviderSet] = Registry(
    "reminder providers", same=lambda a, b: type(a.source) is type(b.source)
)


def reminder_providers_register(providers: ProviderSet) -> None:
    """Register a source type's providers; registering the same type twice is a bug unless
    it is the same module imported again."""
    _providers.register(providers.source_type, providers)


def reminder_providers_for(source_type: str) -> ProviderSet:
    found = _providers.get(source_type)
    if found is None:
        raise UnknownSourceType(f"no reminder providers for source type {source_type!r}")
    return found


def reminder_source_types() -> list[str]:
    return _providers.keys()


def reminder_providers_override(providers: ProviderSet) -> AbstractContextManager[ProviderSet]:
    """A source type's providers swapped in for a block (tests, tools)."""
    return _providers.override(providers.source_type, providers)
