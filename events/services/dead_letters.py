"""Dead letters: at most one open per (handler, key), each new one raising exactly one alert;
a replay re-publishes the stored envelope with the same key and a new ``event_id``."""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from datetime import datetime

from django.db import transaction
from django.utils import timezone

from common.handoff import after_commit
from common.ledger import Ledger, Move, Step, ledger_move, ledger_move_row
from common.sql import insert_ignore_returning
from events.envelope import Envelope
from events.models import TYPE_MAX_LENGTH, EventDeadLetter, EventHandlerAttempt
from events.registry import DeadLetterAlert, registry
from events.services.publish import event_send_on_commit
from events.states import (
    DEAD_LETTER_NOT_REPLAYABLE,
    DEAD_LETTER_TRANSITIONS,
    DeadLetterReason,
    DeadLetterStatus,
)

logger = logging.getLogger(__name__)

LAST_ERROR_MAX_CHARS = 4000
# A replay and its undoing are the moves; who replayed it and when are on the row.
DEAD_LETTERS = Ledger(EventDeadLetter, edges=DEAD_LETTER_TRANSITIONS)


class DeadLetterNotFound(LookupError):
    pass


class DeadLetterNotReplayable(ValueError):
    """Replaying would only fail the same way (a malformed envelope)."""


def dead_letter_record(
    *,
    message: Mapping[str, object],
    event_type: str,
    idempotency_key: str,
    handler: str,
    reason: DeadLetterReason,
    attempts: int,
    last_error: str,
    now: datetime,
) -> int | None:
    """Store a dead letter and alert after commit; None when one is already open for
    (handler, key): a redelivered dead event adds no row and no alert. ``message`` is what
    arrived, whatever it holds: a value JSON cannot take is stored as its ``repr``."""
    row = {
        "envelope": json.loads(json.dumps(message, default=repr)),
        "event_type": event_type[:TYPE_MAX_LENGTH],
        "idempotency_key": idempotency_key,
        "handler": handler,
        "reason": reason,
        "attempts": attempts,
        "last_error": last_error[-LAST_ERROR_MAX_CHARS:],
        "status": DeadLetterStatus.OPEN,
        "version": 0,
        "created_at": now,
        "replayed_at": None,
        "replayed_by": "",
        "replay_event_id": "",
    }
    inserted = insert_ignore_returning(EventDeadLetter, [row])
    if not inserted:
        return None
    alert = DeadLetterAlert(
        dead_letter_id=int(inserted[0][0]),
        event_type=row["event_type"],
        idempotency_key=idempotency_key,
        handler=handler,
        reason=str(reason),
        attempts=attempts,
        last_error=row["last_error"],
    )
    after_commit(lambda: dead_letter_alert(alert))
    return alert.dead_letter_id


def dead_letter_alert(alert: DeadLetterAlert) -> None:
    """The alert docs/spec.md §7 demands: an error line operators filter on, then every registered
    listener (a listener's failure is logged, never raised)."""
    logger.error(
        "EVENT_DEAD_LETTERED id=%s type=%s handler=%s reason=%s idempotency_key=%s attempts=%s",
        alert.dead_letter_id,
        alert.event_type,
        alert.handler,
        alert.reason,
        alert.idempotency_key,
        alert.attempts,
        extra={
            "deadLetterId": alert.dead_letter_id,
            "eventType": alert.event_type,
            "handler": alert.handler,
            "reason": alert.reason,
            "idempotencyKey": alert.idempotency_key,
        },
    )
    for listener in registry.listeners():
        try:
            listener(alert)
        except Exception:
            logger.exception("dead-letter listener %r failed", listener)


def dead_letter_replay(
    *, dead_letter_id: int, actor: str, now: datetime | None = None
) -> Envelope | None:
    """Mark the dead letter replayed (who, when), give its handler a fresh attempt budget and
    re-publish after commit. None if it was already replayed. If the publish fails the dead
    letter is reopened, so a replay is never silently lost."""
    now = now or timezone.now()
    dead = EventDeadLetter.objects.filter(pk=dead_letter_id).first()
    if dead is None:
        raise DeadLetterNotFound(f"no dead letter {dead_letter_id}")
    if dead.reason in DEAD_LETTER_NOT_REPLAYABLE:
        raise DeadLetterNotReplayable(f"dead letter {dead.pk} is {dead.reason}: not replayable")
    if dead.status != DeadLetterStatus.OPEN:
        return None
    envelope = Envelope.from_message(dead.envelope).republished()
    replayed = {
        "replayed_at": now,
        "replayed_by": actor[:150],
        "replay_event_id": envelope.event_id,
    }
    with transaction.atomic():
        step = Step(DeadLetterStatus.REPLAYED)
        if not ledger_move_row(DEAD_LETTERS, dead, steps=[step], sets=replayed, now=now):
            return None
        EventHandlerAttempt.objects.filter(
            handler=dead.handler, idempotency_key=dead.idempotency_key
        ).delete()
        replayed_version = dead.version
        event_send_on_commit(
            envelope, on_failure=lambda: _dead_letter_reopen(dead.pk, replayed_version, now)
        )
    logger.info("dead letter %s replayed by %s as event %s", dead.pk, actor, envelope.event_id)
    return envelope


def _dead_letter_reopen(dead_letter_id: int, version: int, now: datetime) -> None:
    reopen = Move(
        dead_letter_id,
        DeadLetterStatus.REPLAYED,
        version,
        [Step(DeadLetterStatus.OPEN)],
        {"replayed_at": None, "replayed_by": "", "replay_event_id": ""},
    )
    if ledger_move(DEAD_LETTERS, [reopen], now=now):
        logger.warning("dead letter %s reopened: its replay could not be published", dead_letter_id)
