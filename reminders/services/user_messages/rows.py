"""A message's scheduler rows follow its schedule. Called with the message locked (every
writer and the beat lock it first), so one sync runs per message at a time.

* an occurrence still wanted whose instant moved: its row is moved in place, re-keyed to the
  new instant by one compare-and-set (with its audit row), its link re-pointed; the row keeps
  its id, attempts and history;
* an occurrence no longer wanted (the bounds shrank, or the new instant lies before the edit):
  its open row is deactivated (``setting_changed``);
* occurrences inside the horizon without a row: ensured and linked;
* completed rows and rows being processed are never touched: a completed occurrence is not
  sent again at its new time, a processing one is revalidated by its handler;
* a cancelled message: every open row is deactivated, completed ones stay as history.
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TypedDict

from django.db import IntegrityError, transaction

from reminders.models import UserMessage, UserMessageOccurrence, UserMessageStatus
from reminders.services.user_messages.schedule import MessageSchedule, Occurrence
from scheduler.keys import UserMessageKey, scheduler_input_hash, scheduler_key, user_message_key
from scheduler.models import DueWork, TriggerType
from scheduler.services import scheduler_deactivate, scheduler_ensure, scheduler_move
from scheduler.states import SCHEDULER_OPEN, SchedulerReason, SchedulerStatus

logger = logging.getLogger(__name__)
S = SchedulerStatus
# Rows exist this far ahead (beat extends them); an occurrence missed by more than LATE_MAX
# (beat down for a day) is skipped rather than sent that late.
HORIZON = timedelta(days=7)
LATE_MAX = timedelta(days=1)
_MOVABLE = frozenset({S.PENDING, S.FAILED, S.DEACTIVATED, S.CANCELLED})


@dataclass
class RowsSynced:
    ensured: list[str] = field(default_factory=list)
    moved: list[str] = field(default_factory=list)
    deactivated: list[str] = field(default_factory=list)


class UserMessageInput(TypedDict):
    userMessage: uuid.UUID
    sequence: int
    at: datetime


@dataclass(frozen=True)
class _Row:
    pk: int
    status: str
    version: int
    key: str


def user_message_input(message: UserMessage, occurrence: Occurrence) -> UserMessageInput:
    """Identity only: subject, text, recipients and channels may change under a pending row."""
    return {"userMessage": message.guid, "sequence": occurrence.sequence, "at": occurrence.utc}


def user_message_occurrence_key(message: UserMessage, occurrence: Occurrence) -> UserMessageKey:
    return user_message_key(message_guid=message.guid, scheduled_on=occurrence.utc)


def user_message_trigger(message: UserMessage) -> str:
    once = message.recurrence == "once"
    return TriggerType.DATE_BASED if once else TriggerType.RECURRING


def user_message_rows_sync(*, message: UserMessage, now: datetime, detail: str = "") -> RowsSynced:
    """Bring the message's rows in line with it (see the module docstring); ``detail`` goes
    to the audit rows of a cancellation."""
    synced = RowsSynced()
    links = {link.sequence: link for link in message.occurrences.all()}
    rows = {
        pk: _Row(pk, status, version, key)
        for pk, status, version, key in DueWork.objects.filter(
            pk__in=[link.scheduler_id for link in links.values()]
        ).values_list("pk", "status", "version", "scheduler_key")
    }
    if message.status == UserMessageStatus.CANCELLED:
        for open_row in rows.values():
            _deactivate(open_row, SchedulerReason.REMINDER_SETTING_INACTIVE, now, synced, detail)
        return synced
    schedule = MessageSchedule.of(message)
    for sequence, link in links.items():
        row = rows.get(link.scheduler_id)
        if row is not None and row.status in _MOVABLE:
            _follow(message, schedule.at(sequence), link, row, now, synced)
    window_start = max(message.schedule_changed_at, now - LATE_MAX)
    for occurrence in schedule.between(window_start, now + HORIZON):
        if occurrence.sequence not in links:
            _ensure(message, occurrence, now, synced)
    return synced


def _wanted(message: UserMessage, occurrence: Occurrence | None) -> bool:
    return occurrence is not None and occurrence.utc >= message.schedule_changed_at


def _follow(
    message: UserMessage,
    occurrence: Occurrence | None,
    link: UserMessageOccurrence,
    row: _Row,
    now: datetime,
    synced: RowsSynced,
) -> None:
    if occurrence is None or not _wanted(message, occurrence):
        _deactivate(row, SchedulerReason.SETTING_CHANGED, now, synced)
        return
    key = scheduler_key(user_message_occurrence_key(message, occurrence))
    if key == row.key:
        if row.status != S.PENDING:
            _ensure(message, occurrence, now, synced)  # reactivated, attempts kept
        return
    if _move(message, occurrence, link, row, key, now):
        synced.moved.append(key)
    else:  # another row holds the new instant: this one stops, that one is ensured
        _deactivate(row, SchedulerReason.SETTING_CHANGED, now, synced)


def _move(
    message: UserMessage,
    occurrence: Occurrence,
    link: UserMessageOccurrence,
    row: _Row,
    key: str,
    now: datetime,
) -> bool:
    """The same row, re-keyed and rescheduled by compare-and-set; False if it lost a race or
    the new key is taken."""
    input_hash = scheduler_input_hash(user_message_input(message, occurrence))
    try:
        with transaction.atomic():
            moved = scheduler_move(
                scheduler_id=row.pk,
                token=row.version,
                from_status=row.status,
                to=S.PENDING,
                now=now,
                detail=f"user message re-timed (was {row.key[-20:]})",
                scheduler_key=key,
                scheduled_on=occurrence.utc,
                scheduled_local_date=occurrence.local_date,
                input_hash=input_hash,
                trigger_type=user_message_trigger(message),
                processing_lease_expires_on=None,
            )
            if moved is None:
                return False
            UserMessageOccurrence.objects.filter(pk=link.pk).update(
                scheduler_key=key,
                scheduled_on=occurrence.utc,
                local_date=occurrence.local_date,
                local_time_rule=occurrence.rule,
                updated_at=now,
            )
    except IntegrityError:
        logger.warning("user message %s: %s is already taken", message.guid, key)
        return False
    return True


def _ensure(
    message: UserMessage, occurrence: Occurrence, now: datetime, synced: RowsSynced
) -> None:
    spec = user_message_occurrence_key(message, occurrence)
    result = scheduler_ensure(
        key=spec,
        scheduled_on=occurrence.utc,
        input_hash=scheduler_input_hash(user_message_input(message, occurrence)),
        time_zone_id=message.farm.time_zone,
        scheduled_local_date=occurrence.local_date,
        trigger_type=user_message_trigger(message),
        farm_id=message.farm_id,
        now=now,
    )
    values = {
        "scheduler_id": result.scheduler_id,
        "scheduler_key": result.scheduler_key,
        "scheduled_on": occurrence.utc,
        "local_date": occurrence.local_date,
        "local_time_rule": occurrence.rule,
        "updated_at": now,
    }
    UserMessageOccurrence.objects.update_or_create(
        message=message,
        sequence=occurrence.sequence,
        defaults=values,
        create_defaults={**values, "created_at": now},
    )
    synced.ensured.append(result.scheduler_key)


def _deactivate(
    row: _Row, reason: SchedulerReason, now: datetime, synced: RowsSynced, detail: str = ""
) -> None:
    if row.status not in SCHEDULER_OPEN:
        return
    if scheduler_deactivate(
        scheduler_id=row.pk,
        token=row.version,
        reason=reason,
        now=now,
        from_status=row.status,
        detail=detail or "user message changed",
    ):
        synced.deactivated.append(row.key)
