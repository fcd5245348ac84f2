"""A command's row-by-row ways: a move, a touch, a retry or expiry. Each is a batch of one
through the stages' one way of moving commands
(``automation.services.transitions.guarded_transitions_apply``, on ``common.ledger``): a
compare-and-set on (status, version) that writes its audit rows in the same statement and,
on a terminal state, frees the endpoint for the next pending command."""

from __future__ import annotations

import logging
import random
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Unpack

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from automation.keys import desired_state_fingerprint
from automation.models import DeviceCommand, DeviceCommandReceipt
from automation.services.run_limits import NO_LIMIT, RunLimit
from automation.services.transitions import (
    CommandFields,
    GuardedTransition,
    Transition,
    guarded_transitions_apply,
)
from automation.states import CommandOrigin, CommandStatus, ReasonCode, command_can_move
from common.json_types import JsonObject, JsonValue
from common.sql import insert_ignore_returning
from devices.models import DeviceInstanceEndpoint

logger = logging.getLogger(__name__)


def command_transition(
    command: DeviceCommand,
    to: CommandStatus,
    reason: ReasonCode,
    *,
    now: datetime | None = None,
    detail: str = "",
    **fields: Unpack[CommandFields],
) -> bool:
    """Move ``command`` from the status and version it was read with; False if someone else
    moved it first (then nothing is written). Updates ``command`` in place on success. The
    batch's primitive with a batch of one (``automation.services.transitions``)."""
    if not command_can_move(command.status, to):
        return False
    move = GuardedTransition(command, [Transition(to, reason, detail)], fields)
    return bool(guarded_transitions_apply([move], now=now or timezone.now()))


def retry_delay_s(attempt: int) -> float:
    """Backoff after attempt ``attempt`` (1-based): around 5 s, 15 s, 45 s, with jitter."""
    ladder = settings.RETRY_BACKOFF_S
    base = ladder[min(max(attempt, 1), len(ladder)) - 1]
    jitter = settings.RETRY_JITTER_RATIO
    return base * random.uniform(1 - jitter, 1 + jitter)


def command_retry_or_expire(
    command: DeviceCommand, reason: ReasonCode, *, now: datetime, detail: str = ""
) -> bool:
    """A transient failure: schedule the next attempt, or expire past the budget.

    The backoff lives in ``next_attempt_at`` (swept by beat), never in a Celery countdown.
    """
    exhausted = command.attempt_count >= command.max_attempts
    next_at = now + timedelta(seconds=retry_delay_s(command.attempt_count))
    fields: CommandFields = {
        "next_attempt_at": next_at,
        "lease_expires_at": None,
        "last_error": detail[:2000],
    }
    with transaction.atomic():
        if command.status == CommandStatus.RETRYING:
            # No new status: the fields alone, on the version read.
            moved = exhausted or bool(
                guarded_transitions_apply([GuardedTransition(command, [], fields)], now=now)
            )
        elif command.status == CommandStatus.PENDING_DISPATCH and exhausted:
            moved = True
        else:
            moved = command_transition(
                command, CommandStatus.RETRYING, reason, now=now, detail=detail, **fields
            )
        if not moved:
            return False
        if exhausted:
            return command_transition(
                command,
                CommandStatus.EXPIRED,
                ReasonCode.RETRY_BUDGET_EXHAUSTED,
                now=now,
                detail=f"{command.attempt_count} attempts; last: {reason}",
            )
        receipt_mark(
            command,
            "retry_mark",
            {
                "reason": str(reason),
                "attempt": command.attempt_count,
                "nextAttemptAt": next_at.isoformat(),
            },
            now,
        )
    return True


def command_await_broker(
    command: DeviceCommand, *, now: datetime, detail: str, claimed: bool
) -> bool:
    """The broker was unreachable (no connection, or it was lost before the PUBACK): the
    attempt is not spent (a ``claimed`` command gives its increment back, so the retry reuses
    the attempt number in receipt keys, and the commandId) and the command waits in
    ``retrying`` for the publisher to reconnect, due again after at most
    ``PUBLISH_RETRY_MAX_WAIT_S``. Older than ``COMMAND_MAX_AGE_S`` it ends ``expired``
    (broker_unreachable) instead, whether an earlier attempt was sent or not."""
    attempts = command.attempt_count - 1 if claimed else command.attempt_count
    age_s = (now - command.created_at).total_seconds()
    if age_s >= settings.COMMAND_MAX_AGE_S:
        return command_transition(
            command,
            CommandStatus.EXPIRED,
            ReasonCode.BROKER_UNREACHABLE,
            now=now,
            detail=f"{age_s:.0f} s old, {attempts} attempts; last: {detail}",
            attempt_count=attempts,
            last_error=detail[:2000],
        )
    wait_s = min(retry_delay_s(attempts), settings.PUBLISH_RETRY_MAX_WAIT_S)
    fields: CommandFields = {
        "attempt_count": attempts,
        "next_attempt_at": now + timedelta(seconds=wait_s),
        "lease_expires_at": None,
        "last_error": detail[:2000],
    }
    reason = ReasonCode.PUBLISH_ERROR
    if command.status != CommandStatus.RETRYING:
        return command_transition(
            command, CommandStatus.RETRYING, reason, now=now, detail=detail, **fields
        )
    # Already retrying (e.g. after an ack timeout): the new reason is audited once.
    path = (
        [Transition(CommandStatus.RETRYING, reason, detail)]
        if command.status_reason != reason
        else []
    )
    return bool(guarded_transitions_apply([GuardedTransition(command, path, fields)], now=now))


def receipt_mark(command: DeviceCommand, kind: str, payload: JsonObject, now: datetime) -> None:
    """A receipt the backend writes about a command (timeout, retry), once per attempt: a
    second mark of the same attempt is absorbed by the receipt's unique key."""
    from automation.keys import receipt_dedupe_key

    row = {
        "dedupe_key": receipt_dedupe_key(
            serial=command.target_serial_number,
            kind=f"{kind}:{command.pk}",
            payload="",
            attempt=command.attempt_count,
        ),
        "command": command.pk,
        "device": command.target_device_id,
        "serial_number": command.target_serial_number,
        "receipt_type": kind,
        "payload": payload,
        "correlation_key": command.device_command_id or "",
        "attempt": command.attempt_count,
        "received_at": now,
    }
    insert_ignore_returning(DeviceCommandReceipt, [row])


@dataclass(frozen=True)
class CommandColumns:
    """The columns every new command shares, whoever decided it (no foreign keys, so the same
    names serve ``objects.create`` and a set-based insert; ``automation.services.rows``)."""

    target_serial_number: str
    command_method: str
    command_params: JsonObject
    target_value: JsonValue
    idempotency_key: str
    desired_state_fingerprint: str
    max_attempts: int
    created_at: datetime
    updated_at: datetime
    max_on_s: int | None  # the run-time limit it carries (``automation.services.run_limits``)
    max_on_value: JsonValue


@dataclass(frozen=True)
class CommandRow:
    """A new ``DeviceCommand`` as ``commands_insert`` takes it (``as_row``; foreign keys by
    their ids): who decided it, its target and the columns every command shares. The one
    shape of a new command, whoever decided it."""

    origin: CommandOrigin
    target_device: int
    target_device_endpoint: int
    columns: CommandColumns
    rule: int | None = None
    rule_execution: int | None = None
    retry_of: int | None = None  # support's retry of an ended command
    requested_by: int | None = None  # a person's command: manual control, a rollout
    request_reason: str = ""


def command_fields(
    target: DeviceInstanceEndpoint,
    value: JsonValue,
    *,
    key: str,
    now: datetime,
    limit: RunLimit = NO_LIMIT,
) -> CommandColumns:
    """The columns every new command for ``value`` on ``target`` shares: the RPC binding's
    request, its fingerprint, the retry budget, the key and the run-time limit, if any."""
    params: JsonObject = {target.rpc_param_key: value}
    return CommandColumns(
        target_serial_number=target.device.serial_number,
        command_method=target.rpc_method,
        command_params=params,
        target_value=value,
        idempotency_key=key,
        desired_state_fingerprint=desired_state_fingerprint(params),
        max_attempts=settings.COMMAND_MAX_ATTEMPTS,
        created_at=now,
        updated_at=now,
        max_on_s=limit.max_on_s,
        max_on_value=limit.max_on_value,
    )
