"""Support staff's manual moves (admin actions, API): every one is a guarded compare-and-set
through the same services the pipeline uses, and records who did it and why in the row's audit
table (``AutomationSchedulerTransition`` / ``CommandTransition``), never a field edit.

Manual retry of a command never reopens it: terminal intents stay terminal (docs/spec.md
§3.3, history is never rewritten). It creates a new intent for the same target and value in
the same rule execution, linked ``retry_of`` the original, with its own idempotency key and,
at dispatch, its own ``deviceCommandId`` (a new command for the device, unlike the automatic
retries of one intent, which reuse theirs).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from django.db import IntegrityError, transaction
from django.db.models import Q
from django.utils import timezone

from automation.keys import intent_retry_idempotency_key
from automation.models import AutomationCommandIntent, AutomationScheduler, CommandTransition
from automation.scheduler.services import scheduler_cancel, scheduler_hold_release, scheduler_move
from automation.services.commands import intent_transition, nudge
from automation.services.cooldown import command_cooldown_clear
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


class CommandRetryRefused(ValueError):
    """Only a command that ended (failed, expired, uncertain, applied) may be retried: a live
    one may still reach the device, and a second command would race it."""


@dataclass(frozen=True)
class CommandRetry:
    """The attempt support asked for: new (``created``), or the one a repeated click made."""

    intent: AutomationCommandIntent
    created: bool


def command_intent_retry(
    *, intent_id: int, actor: str, reason: str, now: datetime | None = None
) -> CommandRetry:
    """A new pending intent for a terminal one's target and value, then a nudge to dispatch.

    The key is the original's key + the retry number, so a repeated click (same number read)
    lands on the same row; while a retry is still live, asking again returns it. The who and
    why are an audit row (reason ``manual``) on the original, whose status never changes.
    Raises ``AutomationCommandIntent.DoesNotExist`` or ``CommandRetryRefused``."""
    detail = _note(actor, reason)
    intent = AutomationCommandIntent.objects.get(pk=intent_id)
    if intent.status not in COMMAND_TERMINAL:
        raise CommandRetryRefused(f"command is {intent.status}, not ended: nothing to retry")
    original = intent.retry_of or intent
    chain = AutomationCommandIntent.objects.filter(Q(pk=original.pk) | Q(retry_of=original))
    live = chain.exclude(status__in=COMMAND_TERMINAL).order_by("pk").first()
    if live is not None:
        return CommandRetry(live, created=False)
    key = intent_retry_idempotency_key(
        original_key=original.idempotency_key, retry_number=original.retries.count() + 1
    )
    return _retry_insert(original, intent, key, detail, now or timezone.now())


def _retry_insert(
    original: AutomationCommandIntent,
    retried: AutomationCommandIntent,
    key: str,
    detail: str,
    now: datetime,
) -> CommandRetry:
    """Insert the retry and its audit row together; a concurrent twin's key wins."""
    with transaction.atomic():
        try:
            with transaction.atomic():
                new = AutomationCommandIntent.objects.create(
                    rule_execution_id=original.rule_execution_id,
                    retry_of=original,
                    rule_id=original.rule_id,
                    target_device_id=original.target_device_id,
                    target_device_endpoint_id=original.target_device_endpoint_id,
                    target_serial_number=original.target_serial_number,
                    command_method=original.command_method,
                    command_params=original.command_params,
                    target_value=original.target_value,
                    idempotency_key=key,
                    desired_state_fingerprint=original.desired_state_fingerprint,
                    status=CommandStatus.PENDING_DISPATCH,
                    max_attempts=original.max_attempts,
                    created_at=now,
                    updated_at=now,
                )
        except IntegrityError:
            return CommandRetry(AutomationCommandIntent.objects.get(idempotency_key=key), False)
        CommandTransition.objects.create(
            intent=original,
            from_status=original.status,
            to_status=original.status,
            reason_code=ReasonCode.MANUAL,
            detail=f"retry of intent {retried.pk} as intent {new.pk} {detail}"[:500],
            attempt=original.attempt_count,
            at=now,
        )
        # Support asked to try again: the pair's cool-down no longer holds rule decisions.
        command_cooldown_clear(
            endpoint_id=original.target_device_endpoint_id, value=original.target_value
        )
        new_id = new.pk
        from automation.tasks import command_intents_dispatch_task

        transaction.on_commit(lambda: nudge(command_intents_dispatch_task, [new_id]))
    return CommandRetry(new, created=True)
