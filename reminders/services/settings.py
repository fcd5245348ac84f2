"""Reminder setting writes and what a change does to scheduler rows (docs/spec.md §5):

| change                              | rows                                               |
|-------------------------------------|----------------------------------------------------|
| offsets / dates / threshold / type  | deactivate + recreate (occurrence identity changed)|
| send time                           | updated in place: same SchedulerKey, new ScheduledOn|
| template / channels / recipients    | untouched: execution reloads them                  |
| deactivated                         | pending rows deactivated                           |
| any                                 | completed rows kept as history                     |

A write publishes ``ReminderSettingChanged`` after commit; its handler
(:func:`reminder_setting_apply`) re-derives every affected source through the one source flow.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from datetime import datetime, time
from decimal import Decimal
from typing import NotRequired, TypedDict, Unpack

from django.utils import timezone

from common.validators import LOCAL_TIME_MESSAGE
from notifications.states import Channel
from reminders.event_types import REMINDER_SETTING_CHANGED, ReminderSettingChangedPayload
from reminders.models import (
    DocumentType,
    RecipientsPolicy,
    ReminderSetting,
    ReminderTrigger,
    ThresholdOperator,
    offsets_days_problem,
)
from reminders.providers.base import UnknownSourceType, reminder_providers_for
from reminders.selectors import occurrence_sources_open, reminder_setting_by_guid
from reminders.services.sync import SyncResult, reminder_source_sync
from reminders.services.writes import RowWrites, revision_publish, stamp_revised
from scheduler.keys import FiringPolicy

IDENTITY_FIELDS = frozenset(
    {
        "trigger_type",
        "document_type",
        "offsets_days",
        "threshold_metric",
        "threshold_operator",
        "threshold_value",
        "firing_policy",
    }
)
SCHEDULE_FIELDS = frozenset({"send_time"})
DELIVERY_FIELDS = frozenset({"name", "template_name", "channels", "recipients_policy"})


class _SettingRules(TypedDict, total=False):
    """What a new setting may leave to its defaults, and its edits may change."""

    document_type: str
    offsets_days: list[int]
    threshold_metric: str
    threshold_operator: str
    threshold_value: Decimal | int | float | None
    firing_policy: str
    send_time: time | None
    recipients_policy: str
    active: bool


class ReminderSettingChanges(_SettingRules, total=False):
    trigger_type: str
    name: str
    template_name: str
    channels: list[str]


class ReminderSettingNew(_SettingRules):
    """A new setting's fields (``channels`` apart: any iterable of channel names)."""

    name: str
    source_type: str
    trigger_type: str
    template_name: str
    farm_id: NotRequired[int | None]
    organization_id: NotRequired[int | None]


EDITABLE_FIELDS = ReminderSettingChanges.__optional_keys__


class ReminderSettingInvalid(ValueError):
    """A setting that could not produce deterministic occurrences (refused, nothing saved)."""


def reminder_setting_validate(setting: ReminderSetting) -> None:
    if (setting.farm_id is None) == (setting.organization_id is None):
        raise ReminderSettingInvalid("a setting belongs to a farm or to an organisation")
    try:
        provider = reminder_providers_for(setting.source_type)
    except UnknownSourceType as exc:
        raise ReminderSettingInvalid(str(exc)) from None
    if provider.trigger_type != setting.trigger_type:
        raise ReminderSettingInvalid(
            f"{setting.source_type} sources use {provider.trigger_type} reminders"
        )
    RecipientsPolicy(setting.recipients_policy)
    if not setting.channels or any(c not in Channel.values for c in setting.channels):
        raise ReminderSettingInvalid(f"channels must be among {Channel.values}")
    if not setting.template_name.strip():
        raise ReminderSettingInvalid("a setting needs a template")
    if setting.trigger_type == ReminderTrigger.DATE_BASED:
        _validate_date_based(setting)
    else:
        _validate_threshold(setting)


_SETTINGS = RowWrites(
    ReminderSetting,
    EDITABLE_FIELDS,
    ReminderSettingInvalid,
    reminder_setting_validate,
    stamp_revised,
)


def reminder_setting_create(
    *,
    channels: Iterable[str],
    now: datetime | None = None,
    **fields: Unpack[ReminderSettingNew],
) -> ReminderSetting:
    unknown = (
        set(fields) - ReminderSettingNew.__required_keys__ - ReminderSettingNew.__optional_keys__
    )
    if unknown:
        raise ReminderSettingInvalid(f"unknown setting fields: {', '.join(sorted(unknown))}")
    now = now or timezone.now()
    new = {**fields, "channels": list(channels)}
    return _SETTINGS.create(new, now=now, then=lambda s: _publish(s, ["created"], now))


def reminder_setting_update(
    *, setting_id: int, now: datetime | None = None, **changes: Unpack[ReminderSettingChanges]
) -> list[str]:
    """Apply ``changes``; the names of the fields that really changed (nothing published
    when none did)."""
    now = now or timezone.now()
    _, changed = _SETTINGS.update(
        setting_id, changes, now=now, then=lambda s, names: _publish(s, names, now), same=_same
    )
    return changed


def reminder_setting_deactivate(*, setting_id: int, now: datetime | None = None) -> list[str]:
    return reminder_setting_update(setting_id=setting_id, now=now, active=False)


def _same(stored: object, given: object) -> bool:
    """Numbers compare by value (``90`` is ``90.0000``), lists item by item."""
    return _normal(stored) == _normal(given)


def _normal(value: object) -> object:
    if isinstance(value, Decimal | float | int) and not isinstance(value, bool):
        return Decimal(str(value)).normalize()
    if isinstance(value, list):
        return [_normal(v) for v in value]
    return value


def _validate_date_based(setting: ReminderSetting) -> None:
    offsets = setting.offsets_days
    if not isinstance(offsets, list) or not offsets:
        raise ReminderSettingInvalid("a date-based setting needs offsets in days")
    problem = offsets_days_problem(offsets)
    if problem is not None:
        raise ReminderSettingInvalid(problem)
    if setting.send_time is None:
        raise ReminderSettingInvalid("a date-based setting needs a local send time")
    if setting.send_time.tzinfo is not None:
        raise ReminderSettingInvalid(f"the send time {LOCAL_TIME_MESSAGE}")
    if setting.document_type:
        DocumentType(setting.document_type)


def _validate_threshold(setting: ReminderSetting) -> None:
    if not setting.threshold_metric or setting.threshold_value is None:
        raise ReminderSettingInvalid("a threshold setting needs a metric and a value")
    ThresholdOperator(setting.threshold_operator)
    FiringPolicy(setting.firing_policy)


def _publish(setting: ReminderSetting, changed: list[str], now: datetime) -> None:
    payload = ReminderSettingChangedPayload(
        setting_id=str(setting.guid),
        farm_id=setting.farm_id,
        organization_id=setting.organization_id,
        source_type=setting.source_type,
        changed_fields=sorted(changed),
        active=setting.active,
    )
    revision_publish(REMINDER_SETTING_CHANGED, "reminder-setting", setting, payload, now)


def reminder_setting_apply(
    *, setting_guid: uuid.UUID | str, changed_fields: Iterable[str], now: datetime
) -> list[SyncResult]:
    """The handler of ``ReminderSettingChanged``: re-derive every source the setting selects
    or still has open rows for. Template and delivery changes touch nothing."""
    setting = reminder_setting_by_guid(setting_guid)
    changed = set(changed_fields)
    if setting is None or (changed and changed <= DELIVERY_FIELDS):
        return []
    provider = reminder_providers_for(setting.source_type)
    sources = set(provider.sources_for_setting(setting))
    sources |= set(occurrence_sources_open(setting))
    return [
        reminder_source_sync(source_type=setting.source_type, source_guid=guid, now=now)
        for guid in sorted(sources, key=str)
    ]
