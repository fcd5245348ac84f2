"""Support staff's manual moves (admin actions, API): every one is a guarded compare-and-set
through the same services the pipeline uses, and records who did it and why in the row's
audit table (``AutomationSchedulerTransition`` / ``CommandTransition``), never a field edit.

Manual retry of a terminal command is deliberately absent: terminal intents stay terminal
(SPEC §3.3), and a new intent for the same rule execution needs a schema change (the intent is
one-to-one with its execution): left to the lead.
"""

from __future__ import annotations

from datetime import datetime

from django.utils import timezone

from automation.models import AutomationCommandIntent, AutomationScheduler
from automation.scheduler.services import scheduler_cancel, scheduler_hold_release, scheduler_move
from automation.services.commands import intent_transition
from automation.states import (
    COMMAND_TERMINAL,
    CommandStatus,
    ReasonCode,
    SchedulerReason,
    SchedulerStatus,
)

REASON_MAX_CHARS = 400


class SupportReasonMissing(ValueError):
    """Every manual move needs a reason a later reader can understand."""


def _note(actor: str, reason: str) -> str:
    reason = reason.strip()
    if not reason:
        raise SupportReasonMissing("a reason is required")
    return f"by {actor[:80]}: {reason[:REASON_MAX_CHARS]}"


def scheduler_support_release(
    *, scheduler_id: int, actor: str, reason: str, now: datetime | None = None
) -> bool:
    """A held row becomes due now (attempts kept). False if it is not held any more."""
    return scheduler_hold_release(
        scheduler_id=scheduler_id, now=now or timezone.now(), detail=_note(actor, reason)
    )


def scheduler_support_retry_now(
    *, scheduler_id: int, actor: str, reason: str, now: datetime | None = None
) -> bool:
    """A Pending row waiting for its backoff, or a Failed row, becomes due now; a held row is
    released. Processing rows belong to a worker and Completed rows are never sent again."""
    detail = _note(actor, reason)
    now = now or timezone.now()
    row = AutomationScheduler.objects.filter(pk=scheduler_id).first()
    if row is None or row.status not in (SchedulerStatus.PENDING, SchedulerStatus.FAILED):
        return False
    if row.is_on_support_hold:
        return scheduler_hold_release(scheduler_id=scheduler_id, now=now, detail=detail)
    moved = scheduler_move(
        scheduler_id=row.pk,
        token=row.version,
        from_status=row.status,
        to=SchedulerStatus.PENDING,
        now=now,
        reason=SchedulerReason.SUPPORT_RELEASED,
        detail=f"retry now {detail}",
        next_retry_on=None,
    )
    return moved is not None


def scheduler_support_cancel(
    *, scheduler_id: int, actor: str, reason: str, now: datetime | None = None
) -> bool:
    """→ Cancelled (a claimed row loses its token). Completed rows stay history."""
    detail = _note(actor, reason)
    row = AutomationScheduler.objects.filter(pk=scheduler_id).first()
    if row is None or row.status in (SchedulerStatus.COMPLETED, SchedulerStatus.CANCELLED):
        return False
    return scheduler_cancel(
        scheduler_id=row.pk,
        token=row.version,
        from_status=row.status,
        now=now or timezone.now(),
        detail=detail,
    )


def command_intent_mark_failed(
    *, intent_id: int, actor: str, reason: str, now: datetime | None = None
) -> bool:
    """A live command → failed with reason ``manual``; frees its endpoint for the next one.
    False if it already ended or moved meanwhile (then nothing is written)."""
    detail = _note(actor, reason)
    intent = AutomationCommandIntent.objects.filter(pk=intent_id).first()
    if intent is None or intent.status in COMMAND_TERMINAL:
        return False
    return intent_transition(
        intent,
        CommandStatus.FAILED,
        ReasonCode.MANUAL,
        now=now or timezone.now(),
        detail=detail,
        last_error=detail,
    )
