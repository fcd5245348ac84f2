"""A reminder row at due time (execution-time revalidation, docs/spec.md §4): reload the setting,
the source, its recipients and template, rebuild the occurrence with the same provider and
key helper, and compare. Invalid → Deactivated with its reason code (an outcome, not a
failure); same key with another input → support hold; otherwise queue the notification."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from reminders.models import ReminderOccurrence, ReminderSetting
from reminders.providers.base import (
    Candidate,
    ReminderProvider,
    SourceState,
    UnknownSourceType,
    reminder_providers_for,
)
from reminders.selectors import reminder_setting_by_guid, reminder_settings_for_source
from reminders.services.delivery import delivery_check, notification_hand_off
from scheduler.keys import (
    ReminderDateKey,
    ReminderThresholdKey,
    SchedulerKeyError,
    parse_scheduler_key,
)
from scheduler.registry import (
    BatchResults,
    Deactivate,
    HandlerResult,
    HoldForSupport,
    PermanentFailure,
    ReminderSettingInactive,
    SchedulerJob,
    SourceNoLongerValid,
    scheduler_batch_each,
)
from scheduler.states import SchedulerReason


@dataclass(frozen=True)
class ReminderDue:
    """Everything reloaded for one due reminder; recipients, template and channels are the
    setting's as it is now."""

    provider: ReminderProvider
    setting: ReminderSetting
    source: SourceState
    candidate: Candidate


Settings = Mapping[str, ReminderSetting]  # by GUID, canonical as keys spell it


def reminder_settings_load(jobs: Sequence[SchedulerJob]) -> Settings:
    """The settings a batch of reminder rows names, in one read (a key that does not parse
    names none: its row fails on resolving)."""
    guids = set()
    for job in jobs:
        with contextlib.suppress(PermanentFailure):
            guids.add(_spec(job.scheduler_key).setting_guid)
    return {str(s.guid): s for s in ReminderSetting.objects.filter(guid__in=guids)}


def reminder_due_batch(jobs: Sequence[SchedulerJob]) -> BatchResults:
    """A batch of reminder rows: their settings in one read, then each valid row's
    notification queued as ``reminder_due_run`` does."""
    settings = reminder_settings_load(jobs)
    return scheduler_batch_each(
        jobs,
        resolve=lambda job: reminder_due_resolve(job, settings=settings),
        run=lambda job, due: reminder_due_run(job, due=due),
    )


def reminder_due_resolve(job: SchedulerJob, *, settings: Settings | None = None) -> ReminderDue:
    """Raise the typed outcome when the row may no longer run; else what it needs
    (``settings``: a batch's, from ``reminder_settings_load``)."""
    spec = _spec(job.scheduler_key)
    try:
        provider = reminder_providers_for(spec.source_type)
    except UnknownSourceType as exc:
        raise PermanentFailure(str(exc)) from None
    if settings is not None:
        setting = settings.get(spec.setting_guid)
    else:
        setting = reminder_setting_by_guid(spec.setting_guid)
    if setting is None or not setting.active:
        raise ReminderSettingInactive(f"setting {spec.setting_guid} is inactive or gone")
    source = provider.load(uuid.UUID(spec.source_guid), now=job.now)
    if source is None or not source.active:
        raise SourceNoLongerValid(f"{spec.source_type} {spec.source_guid} is inactive or gone")
    if setting.pk not in {s.pk for s in reminder_settings_for_source(source, provider)}:
        raise Deactivate(
            "the setting no longer selects this source", reason=SchedulerReason.SETTING_CHANGED
        )
    candidate = _candidate(job, provider, setting, source)
    if candidate.input_hash != job.input_hash:
        raise HoldForSupport(
            f"reloaded input {candidate.input_hash[:16]} ≠ row input {job.input_hash[:16]}"
        )
    delivery_check(
        template_name=setting.template_name,
        channels=setting.channels,
        recipient_policy=setting.recipients_policy,
    )
    return ReminderDue(provider, setting, source, candidate)


def _spec(key: str) -> ReminderDateKey | ReminderThresholdKey:
    try:
        spec = parse_scheduler_key(key)
    except SchedulerKeyError as exc:
        raise PermanentFailure(str(exc)) from None
    if not isinstance(spec, ReminderDateKey | ReminderThresholdKey):
        raise PermanentFailure(f"not a reminder key: {key[:80]}")
    return spec


def _candidate(
    job: SchedulerJob, provider: ReminderProvider, setting: ReminderSetting, source: SourceState
) -> Candidate:
    wanted = provider.expected(setting=setting, source=source, now=job.now)
    expected = {c.key_text: c for c in wanted}
    candidate = expected.get(job.scheduler_key)
    if candidate is not None:
        return candidate
    occurrence = ReminderOccurrence.objects.filter(scheduler_key=job.scheduler_key).first()
    reason = (
        provider.stale_reason(occurrence=occurrence, setting=setting, source=source)
        if occurrence is not None
        else SchedulerReason.SOURCE_NO_LONGER_VALID
    )
    raise Deactivate("the source no longer wants this occurrence", reason=reason)


def reminder_due_run(job: SchedulerJob, *, due: ReminderDue | None = None) -> HandlerResult:
    """Queue the reminder's notification, keyed by the row's SchedulerKey (``due``: the row
    already resolved)."""
    due = due or reminder_due_resolve(job)
    context = due.provider.context(setting=due.setting, source=due.source, candidate=due.candidate)
    return notification_hand_off(
        source_key=job.scheduler_key,
        farm_id=due.source.farm_id,
        recipient_policy=due.setting.recipients_policy,
        template_name=due.setting.template_name,
        channels=tuple(due.setting.channels),
        context=context,
        now=job.now,
    )
