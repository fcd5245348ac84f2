"""The one way a command intent changes status: a compare-and-set on (status, version) that
writes its audit row in the same transaction and, on a terminal state, frees the endpoint
for the next pending command."""

from __future__ import annotations

import logging
import random
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import F
from django.utils import timezone

from automation.keys import desired_state_fingerprint
from automation.models import AutomationCommandIntent, CommandTransition, DeviceCommandReceipt
from automation.services.moves import endpoints_released
from automation.states import (
    COMMAND_TERMINAL,
    CommandStatus,
    ReasonCode,
    command_can_move,
)
from devices.models import DeviceInstanceEndpoint

logger = logging.getLogger(__name__)


def intent_transition(
    intent: AutomationCommandIntent,
    to: CommandStatus,
    reason: ReasonCode,
    *,
    now: datetime | None = None,
    detail: str = "",
    **fields: Any,
) -> bool:
    """Move ``intent`` from the status and version it was read with; False if someone else
    moved it first (then nothing is written). Updates ``intent`` in place on success."""
    if not command_can_move(intent.status, to):
        return False
    now = now or timezone.now()
    updates: dict[str, Any] = {"status": to, "status_reason": reason, "updated_at": now, **fields}
    if to in COMMAND_TERMINAL:
        updates.update(
            inflight_endpoint=None, finished_at=now, lease_expires_at=None, next_attempt_at=None
        )
    with transaction.atomic():
        moved = AutomationCommandIntent.objects.filter(
            pk=intent.pk, status=intent.status, version=intent.version
        ).update(version=F("version") + 1, **updates)
        if moved != 1:
            return False
        CommandTransition.objects.create(
            intent=intent,
            from_status=intent.status,
            to_status=to,
            reason_code=reason,
            detail=detail[:500],
            attempt=updates.get("attempt_count", intent.attempt_count),
            at=now,
        )
        for name, value in updates.items():
            setattr(intent, name, value)
        intent.version += 1
        if to in COMMAND_TERMINAL:
            endpoint_id = intent.target_device_endpoint_id
            transaction.on_commit(lambda: endpoints_released([endpoint_id]))
    logger.info(
        "command %s -> %s (%s)",
        intent.device_command_id,
        to,
        reason,
        extra={"commandIntentId": intent.pk, "deviceCommandId": intent.device_command_id},
    )
    return True


def retry_delay_s(attempt: int) -> float:
    """Backoff after attempt ``attempt`` (1-based): around 5 s, 15 s, 45 s, with jitter."""
    ladder = settings.RETRY_BACKOFF_S
    base = ladder[min(max(attempt, 1), len(ladder)) - 1]
    jitter = settings.RETRY_JITTER_RATIO
    return base * random.uniform(1 - jitter, 1 + jitter)


def intent_touch(intent: AutomationCommandIntent, *, now: datetime, **fields: Any) -> bool:
    """Compare-and-set of non-status fields (lease, next attempt) on the version read."""
    moved = AutomationCommandIntent.objects.filter(
        pk=intent.pk, status=intent.status, version=intent.version
    ).update(version=F("version") + 1, updated_at=now, **fields)
    if moved != 1:
        return False
    for name, value in fields.items():
        setattr(intent, name, value)
    intent.version += 1
    intent.updated_at = now
    return True


def intent_retry_or_expire(
    intent: AutomationCommandIntent, reason: ReasonCode, *, now: datetime, detail: str = ""
) -> bool:
    """A transient failure: schedule the next attempt, or expire past the budget.

    The backoff lives in ``next_attempt_at`` (swept by beat), never in a Celery countdown.
    """
    exhausted = intent.attempt_count >= intent.max_attempts
    next_at = now + timedelta(seconds=retry_delay_s(intent.attempt_count))
    fields = {"next_attempt_at": next_at, "lease_expires_at": None, "last_error": detail[:2000]}
    with transaction.atomic():
        if intent.status == CommandStatus.RETRYING:
            moved = exhausted or intent_touch(intent, now=now, **fields)
        elif intent.status == CommandStatus.PENDING_DISPATCH and exhausted:
            moved = True
        else:
            moved = intent_transition(
                intent, CommandStatus.RETRYING, reason, now=now, detail=detail, **fields
            )
        if not moved:
            return False
        if exhausted:
            return intent_transition(
                intent,
                CommandStatus.EXPIRED,
                ReasonCode.RETRY_BUDGET_EXHAUSTED,
                now=now,
                detail=f"{intent.attempt_count} attempts; last: {reason}",
            )
        receipt_mark(
            intent,
            "retry_mark",
            {
                "reason": str(reason),
                "attempt": intent.attempt_count,
                "nextAttemptAt": next_at.isoformat(),
            },
            now,
        )
    return True


def intent_await_broker(
    intent: AutomationCommandIntent, *, now: datetime, detail: str, claimed: bool
) -> bool:
    """The broker was unreachable (no connection, or it was lost before the PUBACK): the
    attempt is not spent (a ``claimed`` intent gives its increment back, so the retry reuses
    the attempt number in receipt keys, and the commandId) and the command waits in
    ``retrying`` for the publisher to reconnect, due again after at most
    ``PUBLISH_RETRY_MAX_WAIT_S``. Older than ``COMMAND_MAX_AGE_S`` it ends ``expired``
    (broker_unreachable) instead, whether an earlier attempt was sent or not."""
    attempts = intent.attempt_count - 1 if claimed else intent.attempt_count
    age_s = (now - intent.created_at).total_seconds()
    if age_s >= settings.COMMAND_MAX_AGE_S:
        return intent_transition(
            intent,
            CommandStatus.EXPIRED,
            ReasonCode.BROKER_UNREACHABLE,
            now=now,
            detail=f"{age_s:.0f} s old, {attempts} attempts; last: {detail}",
            attempt_count=attempts,
            last_error=detail[:2000],
        )
    wait_s = min(retry_delay_s(attempts), settings.PUBLISH_RETRY_MAX_WAIT_S)
    fields: dict[str, Any] = {
        "attempt_count": attempts,
        "next_attempt_at": now + timedelta(seconds=wait_s),
        "lease_expires_at": None,
        "last_error": detail[:2000],
    }
    reason = ReasonCode.PUBLISH_ERROR
    if intent.status != CommandStatus.RETRYING:
        return intent_transition(
            intent, CommandStatus.RETRYING, reason, now=now, detail=detail, **fields
        )
    first_time = intent.status_reason != reason
    with transaction.atomic():
        if not intent_touch(intent, now=now, status_reason=reason, **fields):
            return False
        if first_time:  # already retrying (e.g. after an ack timeout): audit the new reason once
            CommandTransition.objects.create(
                intent=intent,
                from_status=intent.status,
                to_status=intent.status,
                reason_code=reason,
                detail=detail[:500],
                attempt=attempts,
                at=now,
            )
    return True


def receipt_mark(
    intent: AutomationCommandIntent, kind: str, payload: dict[str, Any], now: datetime
) -> None:
    """A receipt the backend writes about a command (timeout, retry), once per attempt."""
    from automation.keys import receipt_dedupe_key

    DeviceCommandReceipt.objects.get_or_create(
        dedupe_key=receipt_dedupe_key(
            serial=intent.target_serial_number,
            kind=f"{kind}:{intent.pk}",
            payload="",
            attempt=intent.attempt_count,
        ),
        defaults={
            "intent": intent,
            "device_id": intent.target_device_id,
            "serial_number": intent.target_serial_number,
            "receipt_type": kind,
            "payload": payload,
            "correlation_key": intent.device_command_id or "",
            "attempt": intent.attempt_count,
            "received_at": now,
        },
    )


def command_fields(
    target: DeviceInstanceEndpoint, value: Any, *, key: str, now: datetime
) -> dict[str, Any]:
    """The columns every new intent for ``value`` on ``target`` shares, whoever decided it:
    the RPC binding's request, its fingerprint, the retry budget and the key."""
    params = {target.rpc_param_key: value}
    return {
        "target_serial_number": target.device.serial_number,
        "command_method": target.rpc_method,
        "command_params": params,
        "target_value": value,
        "idempotency_key": key,
        "desired_state_fingerprint": desired_state_fingerprint(params),
        "max_attempts": settings.COMMAND_MAX_ATTEMPTS,
        "created_at": now,
        "updated_at": now,
    }
