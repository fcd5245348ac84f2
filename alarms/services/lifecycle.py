"""Raise, acknowledge and clear. A raise opens an alarm with an INSERT absorbed by the
unique key on open alarms, or bumps the open one's count: two concurrent raisers end with
one alarm counted twice. Every status move goes through ``alarm_move``."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Unpack

from django.db import transaction
from django.db.models import Case, F, When

from alarms.models import Alarm
from alarms.services.moves import ALARMS, AlarmFields, alarm_move, alarm_step
from alarms.states import (
    ACTOR_MAX_CHARS,
    DETAIL_MAX_CHARS,
    AlarmReason,
    AlarmSeverity,
    AlarmSource,
    AlarmStatus,
    AlarmType,
)
from common.handoff import enqueue_on_commit
from common.ledger import ledger_created
from common.sql import insert_ignore_returning
from config.task_names import ALARMS_NOTIFY
from devices.models import Farm

# The notification sweep's task, started at once for a new alarm (beat's sweep would pick
# it up anyway); named, not imported: alarms sits below notifications.
# A move lost to a concurrent bump of the version (a notification claimed) is re-read and
# tried again this many times; a lost raise means the open alarm was just cleared.
MOVE_ATTEMPTS = 5


def _choice(value: str, choices: type[AlarmSource | AlarmType | AlarmSeverity], name: str) -> None:
    if value not in choices.values:
        raise ValueError(f"{name} must be one of {', '.join(choices.values)}, not {value!r}")


def _open(source: str, source_id: int, type: str) -> Alarm | None:
    return (
        Alarm.objects.filter(source=source, source_id=source_id, type=type)
        .exclude(status=AlarmStatus.CLEARED)
        .first()
    )


def _bump(alarm_id: int, *, detail: str, now: datetime) -> bool:
    """A repeat of an open alarm: a note, not a move (no version bump, no audit row)."""
    return (
        Alarm.objects.filter(pk=alarm_id)
        .exclude(status=AlarmStatus.CLEARED)
        .update(
            count=F("count") + 1,
            last_raised_at=Case(
                When(last_raised_at__lt=now, then=now), default=F("last_raised_at")
            ),
            detail=detail if detail else F("detail"),
        )
        == 1
    )


def alarm_raise(
    *,
    farm_id: int,
    source: str,
    source_id: int,
    type: str,
    severity: str,
    detail: str = "",
    actor: str,
    now: datetime,
) -> int:
    """The open alarm's id: a new one (audited as raised by ``actor``, its first notification
    due now) or the open one with its count and last raised time bumped. An acknowledged
    alarm raised again stays acknowledged: the person who took it is already on it."""
    _choice(source, AlarmSource, "source")
    _choice(type, AlarmType, "type")
    _choice(severity, AlarmSeverity, "severity")
    detail = detail[:DETAIL_MAX_CHARS]
    organization_id = Farm.objects.values_list("organization_id", flat=True).get(pk=farm_id)
    for _ in range(MOVE_ATTEMPTS):
        found = _open(source, source_id, type)
        if found is not None:
            if _bump(found.pk, detail=detail, now=now):
                return found.pk
            continue  # cleared meanwhile: open a new one
        with transaction.atomic():
            inserted = insert_ignore_returning(
                Alarm,
                [
                    {
                        "organization": organization_id,
                        "farm": farm_id,
                        "source": source,
                        "source_id": source_id,
                        "type": type,
                        "severity": severity,
                        "status": AlarmStatus.ACTIVE,
                        "detail": detail,
                        "first_raised_at": now,
                        "last_raised_at": now,
                        "next_notify_at": now,
                    }
                ],
            )
            if inserted:
                alarm_id = int(inserted[0][0])
                step = alarm_step(
                    AlarmStatus.ACTIVE, AlarmReason.RAISED, actor=actor, comment=detail
                )
                ledger_created(ALARMS, [(alarm_id, step)], now=now)
                enqueue_on_commit(ALARMS_NOTIFY)
                return alarm_id
        # Another raiser's insert won the unique key: count this raise on its alarm.
    raise RuntimeError(f"alarm {source}:{source_id} {type}: raise lost {MOVE_ATTEMPTS} times")


def _moved_retrying(
    load: Callable[[], Alarm | None],
    to: AlarmStatus,
    reason: AlarmReason,
    *,
    actor: str,
    comment: str = "",
    now: datetime,
    **fields: Unpack[AlarmFields],
) -> bool:
    """A move that ends the repeats: read the alarm again and retry while another move won
    its compare-and-set (a raise bumping the count, say); False once ``load`` finds none."""
    fields["next_notify_at"] = None
    for _ in range(MOVE_ATTEMPTS):
        alarm = load()
        if alarm is None:
            return False
        if alarm_move(alarm, to, reason, actor=actor, comment=comment, now=now, **fields):
            return True
    return False


def _by_id(
    alarm_id: int, *, unless: AlarmStatus | None = None, only: AlarmStatus | None = None
) -> Callable[[], Alarm | None]:
    def load() -> Alarm | None:
        alarm = Alarm.objects.filter(pk=alarm_id).first()
        if alarm is None or alarm.status == unless or (only is not None and alarm.status != only):
            return None
        return alarm

    return load


def alarm_clear_by_cause(
    *, source: str, source_id: int, type: str, cause: str, now: datetime
) -> bool:
    """Clear the open alarm, if any, with the cause (``"device back"``) as its actor."""
    cause = cause[:ACTOR_MAX_CHARS]
    return _moved_retrying(
        lambda: _open(source, source_id, type),
        AlarmStatus.CLEARED,
        AlarmReason.CLEARED_BY_CAUSE,
        actor=cause,
        now=now,
        cleared_by=cause,
        cleared_at=now,
    )


def alarm_acknowledge(*, alarm_id: int, actor: str, comment: str, now: datetime) -> bool:
    """Someone is on it: the repeats stop. False if the alarm is not active (any more)."""
    return _moved_retrying(
        _by_id(alarm_id, only=AlarmStatus.ACTIVE),
        AlarmStatus.ACKNOWLEDGED,
        AlarmReason.ACKNOWLEDGED,
        actor=actor,
        comment=comment,
        now=now,
        acknowledged_by=actor[:ACTOR_MAX_CHARS],
        acknowledged_at=now,
        acknowledge_comment=comment[:DETAIL_MAX_CHARS],
    )


def alarm_clear(*, alarm_id: int, actor: str, comment: str, now: datetime) -> bool:
    """Cleared by hand (active or acknowledged). False if it is cleared already or gone."""
    return _moved_retrying(
        _by_id(alarm_id, unless=AlarmStatus.CLEARED),
        AlarmStatus.CLEARED,
        AlarmReason.CLEARED_BY_HAND,
        actor=actor,
        comment=comment,
        now=now,
        cleared_by=actor[:ACTOR_MAX_CHARS],
        cleared_at=now,
        clear_comment=comment[:DETAIL_MAX_CHARS],
    )
