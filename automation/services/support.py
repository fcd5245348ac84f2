"""Support staff's manual moves on commands (admin actions, API): every one is a guarded
compare-and-set through the same services the pipeline uses, and records who did it and why
in the audit row of the move it made (``CommandTransition``), never a field edit. The
scheduler's are in ``scheduler.services.support``.

Manual retry of a command never reopens it: terminal commands stay terminal (docs/spec.md
§3.3, history is never rewritten). It creates a new command for the same target and value in
the same rule execution, linked ``retry_of`` the original, with its own idempotency key and,
at dispatch, its own ``deviceCommandId`` (a new command for the device, unlike the automatic
retries of one command, which reuse theirs).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from automation.keys import retry_command_idempotency_key
from automation.models import DeviceCommand
from automation.services.commands import CommandColumns, CommandRow, command_transition
from automation.services.cooldown import command_cooldown_clear
from automation.services.spine import Committed, hand_on_commit
from automation.services.transitions import CommandInsert, Transition, commands_insert
from automation.states import COMMAND_TERMINAL, CommandOrigin, CommandStatus, ReasonCode
from scheduler.services.support import support_note


def command_mark_failed(
    *, command_id: int, actor: str, reason: str, now: datetime | None = None
) -> bool:
    """A live command → failed with reason ``manual``; frees its endpoint for the next one.
    False if it already ended or moved meanwhile (then nothing is written)."""
    detail = support_note(actor, reason)
    command = DeviceCommand.objects.filter(pk=command_id).first()
    if command is None or command.status in COMMAND_TERMINAL:
        return False
    return command_transition(
        command,
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

    command: DeviceCommand
    created: bool


def command_retry(
    *, command_id: int, actor: str, reason: str, now: datetime | None = None
) -> CommandRetry:
    """A new pending command for a terminal one's target and value, then a nudge to dispatch.

    The key is the original's key + the retry number, so a repeated click (same number read)
    lands on the same row; while a retry is still live, asking again returns it. The who and
    why are the retry's first audit row (reason ``manual``); the original never moves, and
    its retries point at it (``retry_of``).
    Raises ``DeviceCommand.DoesNotExist`` or ``CommandRetryRefused``."""
    detail = support_note(actor, reason)
    command = DeviceCommand.objects.get(pk=command_id)
    if command.status not in COMMAND_TERMINAL:
        raise CommandRetryRefused(f"command is {command.status}, not ended: nothing to retry")
    original = command.retry_of or command
    chain = DeviceCommand.objects.filter(Q(pk=original.pk) | Q(retry_of=original))
    live = chain.exclude(status__in=COMMAND_TERMINAL).order_by("pk").first()
    if live is not None:
        return CommandRetry(live, created=False)
    key = retry_command_idempotency_key(
        original_key=original.idempotency_key, retry_number=original.retries.count() + 1
    )
    return _retry_insert(original, command, key, detail, now or timezone.now())


def _retry_insert(
    original: DeviceCommand,
    retried: DeviceCommand,
    key: str,
    detail: str,
    now: datetime,
) -> CommandRetry:
    """Insert the retry with its first audit row, which names the command retried and who
    asked why; a concurrent twin's key wins."""
    columns = CommandColumns(
        target_serial_number=original.target_serial_number,
        command_method=original.command_method,
        command_params=original.command_params,
        target_value=original.target_value,
        idempotency_key=key,
        desired_state_fingerprint=original.desired_state_fingerprint,
        max_attempts=original.max_attempts,
        created_at=now,
        updated_at=now,
        max_on_s=None,  # as before: a retry carries no run-time limit
        max_on_value=None,
    )
    row = CommandRow(
        origin=CommandOrigin(original.origin),  # a manual command's retry stays manual
        target_device=original.target_device_id,
        target_device_endpoint=original.target_device_endpoint_id,
        columns=columns,
        rule=original.rule_id,
        rule_execution=original.rule_execution_id,
        retry_of=original.pk,
        requested_by=original.requested_by_id,
        request_reason=original.request_reason,
    )
    step = Transition(
        CommandStatus.PENDING_DISPATCH, ReasonCode.MANUAL, f"retry of command {retried.pk} {detail}"
    )
    with transaction.atomic():
        made = commands_insert([CommandInsert(row, step)], now=now)
        if not made:
            return CommandRetry(DeviceCommand.objects.get(idempotency_key=key), False)
        # Support asked to try again: the pair's cool-down no longer holds rule decisions.
        command_cooldown_clear(
            endpoint_id=original.target_device_endpoint_id, value=original.target_value
        )
        hand_on_commit(Committed(commands=[made[key]]))
    return CommandRetry(DeviceCommand.objects.get(pk=made[key]), created=True)
