"""The dispatcher: the only code that publishes MQTT RPC.

Guarantees: an intent is claimed by exactly one worker (lease + version compare-and-set);
the database's unique ``inflight_endpoint`` keeps one live command per device endpoint;
``deviceCommandId`` is assigned once and reused on every retry, so a crash between publish
and marking ``dispatched`` leads to a re-send the device recognises, never a second apply.
A broker outage spends no attempts: while the broker is unreachable a command waits (capped,
bounded by ``COMMAND_MAX_AGE_S``) with its budget intact; a connected broker's silence does.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import F, Q
from django.utils import timezone

from automation import coordination
from automation.gates import command_gate_failure
from automation.keys import new_device_command_id
from automation.models import AutomationCommandIntent, AutomationRule
from automation.services.commands import (
    intent_await_broker,
    intent_retry_or_expire,
    intent_transition,
)
from automation.services.reconcile import command_intent_reconcile
from automation.services.targets import targets_lock
from automation.states import COMMAND_DISPATCHABLE, CommandStatus, ReasonCode
from devices.models import DeviceInstanceEndpoint
from devices.mqtt.client import MqttError
from devices.mqtt.contract import RpcRequest, rpc_request_topic
from devices.mqtt.publisher import BrokerUnreachable

logger = logging.getLogger(__name__)

PublishFn = Callable[[str, bytes], int]
ConnectedFn = Callable[[], bool]


class DispatchOutcome(StrEnum):
    DISPATCHED = "dispatched"
    NOT_DISPATCHABLE = "not_dispatchable"
    NOT_DUE = "not_due"
    LEASED = "leased"
    ENDPOINT_BUSY = "endpoint_busy"
    LOST_RACE = "lost_race"
    GATE_FAILED = "gate_failed"
    RETRY_SCHEDULED = "retry_scheduled"
    EXPIRED = "expired"
    BROKER_UNREACHABLE = "broker_unreachable"  # waiting for the publisher; no attempt spent


def _claim(intent: AutomationCommandIntent, now: datetime) -> DispatchOutcome | None:
    """Lease the intent and take the endpoint's inflight slot, or say why not.

    A command never sent is claimed under its endpoint's evaluation lock: evaluation may be
    replacing it (``automation.services.targets``), and a decision that replaced it must not
    see it go out after all."""
    lease_until = now + timedelta(seconds=settings.DISPATCH_LEASE_S)
    command_id = intent.device_command_id or new_device_command_id()
    try:
        with transaction.atomic():
            if intent.status == CommandStatus.PENDING_DISPATCH and intent.attempt_count == 0:
                targets_lock([intent.target_device_endpoint_id])
            moved = AutomationCommandIntent.objects.filter(
                Q(lease_expires_at__isnull=True) | Q(lease_expires_at__lte=now),
                pk=intent.pk,
                status=intent.status,
                version=intent.version,
            ).update(
                version=F("version") + 1,
                attempt_count=F("attempt_count") + 1,
                lease_expires_at=lease_until,
                inflight_endpoint_id=intent.target_device_endpoint_id,
                device_command_id=command_id,
                updated_at=now,
            )
    except IntegrityError:
        return DispatchOutcome.ENDPOINT_BUSY  # another live command holds this endpoint
    if moved != 1:
        return DispatchOutcome.LOST_RACE
    intent.version += 1
    intent.attempt_count += 1
    intent.lease_expires_at = lease_until
    intent.inflight_endpoint_id = intent.target_device_endpoint_id
    intent.device_command_id = command_id
    return None


def _gate(
    intent: AutomationCommandIntent, now: datetime
) -> tuple[ReasonCode | None, DeviceInstanceEndpoint]:
    """Every safety gate of docs/spec.md §3.5, on fresh rows; also the target as read now."""
    rule = AutomationRule.objects.get(pk=intent.rule_id)
    target = DeviceInstanceEndpoint.objects.select_related("device", "profile_endpoint").get(
        pk=intent.target_device_endpoint_id
    )
    failure = command_gate_failure(
        rule,
        target,
        value=intent.target_value,
        now=now,
        freshness_s=settings.DEVICE_FRESHNESS_S,
    )
    return failure, target


def _precheck(
    intent: AutomationCommandIntent | None, now: datetime, trust_cache: bool
) -> DispatchOutcome | None:
    if intent is None or intent.status not in COMMAND_DISPATCHABLE:
        return DispatchOutcome.NOT_DISPATCHABLE
    if intent.next_attempt_at is not None and intent.next_attempt_at > now:
        return DispatchOutcome.NOT_DUE
    if intent.lease_expires_at is not None and intent.lease_expires_at > now:
        return DispatchOutcome.LEASED
    if trust_cache:
        holder = coordination.inflight_holder(intent.target_device_endpoint_id)
        if holder is not None and holder != intent.pk:
            return DispatchOutcome.ENDPOINT_BUSY
    return None


def command_intent_dispatch(
    *,
    intent_id: int,
    publish: PublishFn,
    now: datetime | None = None,
    trust_cache: bool = True,
    connected: ConnectedFn | None = None,
) -> DispatchOutcome:
    """Claim, re-check, publish (waiting for the broker's PUBACK) and mark ``dispatched``.

    ``trust_cache=False`` (the sweep) ignores the inflight marker and lets the database decide.
    ``connected`` (the publisher's state) lets a command already waiting for the broker wait
    on without a claim, a gate check or a publish while the publisher is still disconnected.
    """
    now = now or timezone.now()
    intent = AutomationCommandIntent.objects.filter(pk=intent_id).first()
    refused = _precheck(intent, now, trust_cache)
    if refused is not None or intent is None:
        return refused or DispatchOutcome.NOT_DISPATCHABLE
    if (
        connected is not None
        and intent.status == CommandStatus.RETRYING
        and intent.attempt_count < intent.max_attempts
        and not connected()
    ):
        return _await_broker(intent, now, "MQTT publisher not connected", claimed=False)
    if intent.attempt_count >= intent.max_attempts:  # claims that crashed used the budget
        intent_retry_or_expire(intent, ReasonCode.RETRY_BUDGET_EXHAUSTED, now=now)
        return DispatchOutcome.EXPIRED
    refused = _claim(intent, now)
    if refused is not None:
        return refused
    coordination.inflight_mark(
        intent.target_device_endpoint_id,
        intent.pk,
        settings.DISPATCH_LEASE_S + settings.ACK_TIMEOUT_S + settings.APPLIED_WINDOW_S,
    )
    gate, target = _gate(intent, now)
    if gate == ReasonCode.TARGET_OFFLINE:  # briefly offline is transient (docs/spec.md §3.4)
        intent_retry_or_expire(intent, gate, now=now, detail="device not seen recently")
        return DispatchOutcome.RETRY_SCHEDULED
    if gate is not None:
        intent_transition(intent, CommandStatus.FAILED, gate, now=now, detail="safety gate")
        return DispatchOutcome.GATE_FAILED
    return _publish(intent, publish, now, target)


def _publish(
    intent: AutomationCommandIntent,
    publish: PublishFn,
    now: datetime,
    target: DeviceInstanceEndpoint,
) -> DispatchOutcome:
    command_id = intent.device_command_id or ""
    deadline = now + timedelta(seconds=settings.ACK_TIMEOUT_S)
    request = RpcRequest(
        command_id=command_id,
        method=intent.command_method,
        params=intent.command_params,
        sent_at=now,
        deadline_at=deadline,
    )
    coordination.correlation_remember(command_id, intent.pk)
    try:
        message_id = publish(rpc_request_topic(intent.target_serial_number), request.to_json())
    except BrokerUnreachable as exc:
        return _await_broker(intent, now, str(exc), claimed=True)
    except MqttError as exc:  # PubackTimeout and local refusals spend the attempt (below)
        expired_before = intent.attempt_count >= intent.max_attempts
        intent_retry_or_expire(intent, ReasonCode.PUBLISH_ERROR, now=now, detail=str(exc))
        return DispatchOutcome.EXPIRED if expired_before else DispatchOutcome.RETRY_SCHEDULED
    first: dict[str, Any] = {}
    if intent.first_dispatched_at is None:  # what telemetry must differ from to prove it
        first = {
            "first_dispatched_at": now,
            "prior_value": target.last_value,
            "prior_value_at": target.last_value_at,
        }
    marked = intent_transition(
        intent,
        CommandStatus.DISPATCHED,
        ReasonCode.DISPATCHED,
        now=now,
        detail=f"attempt {intent.attempt_count}",
        dispatched_at=now,
        deadline_at=deadline,
        lease_expires_at=None,
        next_attempt_at=None,
        mqtt_request_id=str(message_id),
        **first,
    )
    if marked:
        # A fast device may have answered before this commit: its receipts are already
        # stored and decide now (reconciliation reads them under the row lock).
        command_intent_reconcile(intent_id=intent.pk)
    return DispatchOutcome.DISPATCHED


def _await_broker(
    intent: AutomationCommandIntent, now: datetime, detail: str, *, claimed: bool
) -> DispatchOutcome:
    """No attempt spent on a broker that was away (no connection, or lost before the PUBACK:
    a copy it got anyway, or one paho resends after reconnecting, is harmless, devices being
    idempotent by commandId). A PUBACK timeout on a live connection does spend one
    (``_publish``): that broker may hold and deliver the request like any sent attempt, and
    counting it bounds the re-sends into a broker that accepts connections but stalls."""
    if not intent_await_broker(intent, now=now, detail=detail, claimed=claimed):
        return DispatchOutcome.LOST_RACE
    if intent.status == CommandStatus.EXPIRED:
        return DispatchOutcome.EXPIRED
    return DispatchOutcome.BROKER_UNREACHABLE


def command_intents_due(*, now: datetime, pending_older_than: datetime, limit: int) -> list[int]:
    """Intents the dispatcher should (re)try now: pending ones whose nudge may have been lost,
    and retries whose backoff has elapsed. Bounded; skips endpoints held by a live command."""
    free = Q(lease_expires_at__isnull=True) | Q(lease_expires_at__lte=now)
    endpoint_free_or_mine = Q(target_device_endpoint__inflight_intent__isnull=True) | Q(
        inflight_endpoint__isnull=False  # a claim that crashed still holds its own slot
    )
    pending = (
        Q(status=CommandStatus.PENDING_DISPATCH, created_at__lt=pending_older_than)
        & endpoint_free_or_mine
    )
    retry = Q(status=CommandStatus.RETRYING, next_attempt_at__lte=now)
    return list(
        AutomationCommandIntent.objects.filter(free & (pending | retry))
        .order_by("created_at")
        .values_list("pk", flat=True)[:limit]
    )
