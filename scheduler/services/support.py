"""Support staff's manual moves on due-work rows (admin actions): each is a guarded
compare-and-set through the scheduler's own moves, with who did it and why in the row's audit
table (``DueWorkTransition``), never a field edit."""

from __future__ import annotations

from datetime import datetime

from django.utils import timezone

from scheduler.models import DueWork
from scheduler.services.finish import scheduler_cancel, scheduler_hold_release
from scheduler.services.moves import scheduler_move
from scheduler.states import SchedulerReason, SchedulerStatus

REASON_MAX_CHARS = 400


class SupportReasonMissing(ValueError):
    """Every manual move needs a reason a later reader can understand."""


def support_note(actor: str, reason: str) -> str:
    reason = reason.strip()
    if not reason:
        raise SupportReasonMissing("a reason is required")
    return f"by {actor[:80]}: {reason[:REASON_MAX_CHARS]}"


def scheduler_support_release(
    *, scheduler_id: int, actor: str, reason: str, now: datetime | None = None
) -> bool:
    """A held row becomes due now (attempts kept). False if it is not held any more."""
    return scheduler_hold_release(
        scheduler_id=scheduler_id, now=now or timezone.now(), detail=support_note(actor, reason)
    )


def scheduler_support_retry_now(
    *, scheduler_id: int, actor: str, reason: str, now: datetime | None = None
) -> bool:
    """A Pending row waiting for its backoff, or a Failed row, becomes due now; a held row is
    released. Processing rows belong to a worker and Completed rows are never sent again."""
    detail = support_note(actor, reason)
    now = now or timezone.now()
    row = DueWork.objects.filter(pk=scheduler_id).first()
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
    detail = support_note(actor, reason)
    row = DueWork.objects.filter(pk=scheduler_id).first()
    if row is None or row.status in (SchedulerStatus.COMPLETED, SchedulerStatus.CANCELLED):
        return False
    return scheduler_cancel(
        scheduler_id=row.pk,
        token=row.version,
        from_status=row.status,
        now=now or timezone.now(),
        detail=detail,
    )
