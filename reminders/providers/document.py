"""The ``document`` source: a dated document (calibration certificate, police vetting,
first-aid certificate, insurance) of a farm, a device or a farm worker. DateBased reminders
``offsetDays`` before its expiry, at the setting's local send time in the farm's zone."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import date, datetime, timedelta
from typing import Any

from django.db.models import Q, QuerySet

from common.localtime import date_minus_days, local_to_utc, local_today
from reminders.models import (
    OFFSET_DAYS_MAX,
    Document,
    DocumentSubject,
    DocumentType,
    ReminderOccurrence,
    ReminderSetting,
    ReminderTrigger,
    SourceType,
)
from reminders.providers.base import (
    Candidate,
    SourceRows,
    SourceState,
    WindowScan,
    reminder_providers_register,
)
from scheduler.keys import reminder_date_key
from scheduler.models import TriggerType
from scheduler.states import SchedulerReason

TRIGGER_KEY = "expiry"


class DateBasedTrigger:
    """One occurrence per offset: scheduledLocalDate = targetDate − offsetDays (calendar
    days), at the send time, converted with the farm's zone (rule recorded). Any source
    with a ``target_date`` can use it."""

    trigger_type = ReminderTrigger.DATE_BASED

    def candidates(
        self, *, setting: ReminderSetting, source: SourceState, now: datetime
    ) -> list[Candidate]:
        if source.target_date is None or setting.send_time is None:
            return []
        return [
            _candidate(setting, source, source.target_date, offset)
            for offset in sorted({int(o) for o in setting.offsets_days}, reverse=True)
        ]

    def expected(
        self, *, setting: ReminderSetting, source: SourceState, now: datetime
    ) -> list[Candidate]:
        return self.candidates(setting=setting, source=source, now=now)

    def stale_reason(
        self, occurrence: ReminderOccurrence, setting: ReminderSetting, source: SourceState | None
    ) -> SchedulerReason:
        if source is None or not source.active or source.target_date is None:
            return SchedulerReason.SOURCE_NO_LONGER_VALID
        if not setting.active:
            return SchedulerReason.REMINDER_SETTING_INACTIVE
        if occurrence.target_date != source.target_date:
            return SchedulerReason.SOURCE_NO_LONGER_VALID
        return SchedulerReason.SETTING_CHANGED


def _candidate(
    setting: ReminderSetting, source: SourceState, target: date, offset: int
) -> Candidate:
    assert setting.send_time is not None
    local_date = date_minus_days(target, offset)
    instant = local_to_utc(local_date, setting.send_time, source.time_zone)
    key = reminder_date_key(
        setting_guid=setting.guid,
        source_type=source.source_type,
        source_guid=source.guid,
        trigger_key=TRIGGER_KEY,
        target_date=target,
        offset_days=offset,
    )
    identity = {
        "setting": setting.guid,
        "sourceType": source.source_type,
        "source": source.guid,
        "trigger": TRIGGER_KEY,
        "targetDate": target,
        "offsetDays": offset,
    }
    return Candidate(
        key=key,
        trigger_type=TriggerType.DATE_BASED,
        scheduled_on=instant.utc,
        scheduled_local_date=local_date,
        time_zone_id=source.time_zone,
        input=identity,
        local_time_rule=instant.rule,
        target_date=target,
        offset_days=offset,
    )


class DocumentProvider(DateBasedTrigger, SourceRows[Document]):
    source_type = SourceType.DOCUMENT
    source_model = Document

    def load(self, guid: uuid.UUID, *, now: datetime) -> SourceState | None:
        doc = Document.objects.select_related("farm", "device").filter(guid=guid).first()
        if doc is None:
            return None
        facts = {"document_type": doc.document_type, "title": doc.title, "subject": _subject(doc)}
        return self.state(doc, active=doc.active, target_date=doc.expires_on, facts=facts)

    def setting_applies(self, setting: ReminderSetting, source: SourceState) -> bool:
        if setting.trigger_type != ReminderTrigger.DATE_BASED:
            return False
        return not setting.document_type or setting.document_type == source.facts["document_type"]

    def setting_selects(self, setting: ReminderSetting) -> Q:
        return Q(document_type=setting.document_type) if setting.document_type else Q()

    def context(
        self, *, setting: ReminderSetting, source: SourceState, candidate: Candidate
    ) -> dict[str, Any]:
        return {
            "farm_name": source.farm_name,
            "document_title": source.facts["title"],
            "document_type": DocumentType(source.facts["document_type"]).label,
            "subject": source.facts["subject"],
            "expires_on": source.target_date,
            "days_before": candidate.offset_days,
            "reminder_at": candidate.scheduled_on,  # rendered in the farm's zone
        }

    def immediate(
        self, *, source: SourceState, candidates: Sequence[Candidate], now: datetime
    ) -> list[Candidate]:
        """A document that arrives (or moves) inside its reminder period still gets one
        reminder now: the latest occurrence whose day has passed, while the expiry is still
        ahead. An already expired document is not reminded retroactively."""
        today = local_today(now, source.time_zone)
        if source.target_date is None or source.target_date < today:
            return []
        past = [c for c in candidates if c.scheduled_local_date < today]
        return [max(past, key=lambda c: c.scheduled_local_date)] if past else []

    def window_rows(self, scan: WindowScan) -> QuerySet[Document] | None:
        """Expiries whose occurrence (expiry − offset) falls in [first, last], for the
        offsets active settings use: one bounded date range per offset."""
        offsets = _active_offsets()
        if not offsets:
            return None
        dated = Q()
        for offset in offsets:
            span = (scan.first + timedelta(days=offset), scan.last + timedelta(days=offset))
            dated |= Q(expires_on__range=span)
        return Document.objects.filter(dated)


def _subject(doc: Document) -> str:
    if doc.subject_kind == DocumentSubject.DEVICE and doc.device is not None:
        return f"device {doc.device.serial_number}"
    if doc.subject_kind == DocumentSubject.WORKER:
        return doc.worker_name
    return "the farm"


def _active_offsets() -> list[int]:
    """Offsets outside the bounds (rows written before they were checked) select nothing:
    such a setting fails on its own when its source is synced."""
    lists = ReminderSetting.objects.filter(
        source_type=SourceType.DOCUMENT, active=True, trigger_type=ReminderTrigger.DATE_BASED
    ).values_list("offsets_days", flat=True)
    return sorted(
        {
            o
            for offsets in lists
            if isinstance(offsets, list)
            for o in offsets
            if isinstance(o, int) and not isinstance(o, bool) and 0 <= o <= OFFSET_DAYS_MAX
        }
    )


reminder_providers_register(DocumentProvider())
