"""Reconciliation: receipts (stored by ``automation.services.receipts``), deadlines and
telemetry decide where a command stands.

``applied`` is reached only with evidence: a state report for the commandId whose reported
value matches, or telemetry of the target endpoint received after the request, equal to the
target and unlike what the endpoint reported before (``decide`` ranks the evidence). The
decision reads the whole receipt set under the intent's row lock, so the order in which a
reply and the dispatcher's own commit arrive cannot lose a transition, and a duplicate
receipt is absorbed by its unique key before it is ever read.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from automation.models import (
    AutomationCommandIntent,
    AutomationEndpointEvent,
    DeviceCommandReceipt,
    ReceiptType,
)
from automation.operators import values_equal
from automation.services.commands import intent_retry_or_expire, intent_transition, receipt_mark
from automation.services.cooldown import (
    COOLDOWN_STATUSES,
    command_cooldown_clear,
    command_cooldown_record,
)
from automation.states import COMMAND_AWAITING_DEVICE, CommandStatus, ReasonCode
from devices.mqtt.contract import (
    ResultCode,
)
from devices.reported import report_value

logger = logging.getLogger(__name__)

_FAILING_CODES = {
    ResultCode.INVALID_PARAM: ReasonCode.INVALID_PARAM,
    ResultCode.NOT_SUPPORTED: ReasonCode.NOT_SUPPORTED,
    ResultCode.HARDWARE_FAULT: ReasonCode.HARDWARE_FAULT,
}


# --- the decision (pure) ----------------------------------------------------------------


@dataclass(frozen=True)
class Evidence:
    """What is known about one command, read under its row lock."""

    status: str
    attempt: int
    deadline_at: datetime | None
    acknowledged_at: datetime | None
    param_key: str
    target_value: Any
    responses: Sequence[tuple[int, str, str, datetime]] = ()  # (attempt, status, code, at)
    states: Sequence[dict[str, Any]] = ()  # reportedState of each state report
    # The reading that proves the command (received after the request was published, equal
    # to the target, unlike the value reported before it), described for the audit row.
    telemetry_reading: str = ""
    endpoint_key: str = ""  # the endpoint's own name, which a state report may use too


@dataclass(frozen=True)
class Decision:
    to: CommandStatus
    reason: ReasonCode
    fields: dict[str, Any] = field(default_factory=dict)
    retry: bool = False  # a transient failure: retry or expire by the budget
    detail: str = ""


def decide(e: Evidence, now: datetime, applied_window_s: float) -> Decision | None:
    """The next transition the evidence justifies, or None. Called repeatedly until None,
    so dispatched + ack + matching state walks dispatched → acknowledged → applied.

    Precedence of evidence, strongest first (README "How the execution core stays correct"):

    1. A refusal of the current attempt (``rejected`` with a non-transient code) → ``failed``
       with that code. The device said no; no report or reading afterwards overrules it.
    2. A state report for this commandId: the value matches → ``applied``; it contradicts →
       ``uncertain``/``state_mismatch`` (the device did something, not this).
    3. Telemetry of the target received after the request was published, equal to the
       target and different from what the endpoint reported before → ``applied``. It is not
       tied to the commandId, so a contradicting state report outranks it.
    4. An ack → ``acknowledged``, also a late one after a timeout (the device has it).
    5. ``busy`` for the current attempt → ``retrying``.
    6. No ack by the deadline → ``retrying``/``ack_timeout``.
    7. Acknowledged, no proof within the applied window → ``uncertain``.
    """
    if e.status not in COMMAND_AWAITING_DEVICE:
        return None
    refusal = _refusal(e)
    if refusal is not None:
        return Decision(CommandStatus.FAILED, refusal, detail="refused by the device")
    reported = [
        value
        for found, value in (
            report_value(s, param_key=e.param_key, endpoint_key=e.endpoint_key) for s in e.states
        )
        if found
    ]
    if any(values_equal(v, e.target_value) for v in reported):
        return _if_acked_first(e, Decision(CommandStatus.APPLIED, ReasonCode.STATE_REPORTED))
    if reported:  # every report contradicts the desired state
        return Decision(
            CommandStatus.UNCERTAIN, ReasonCode.STATE_MISMATCH, detail=f"reported {reported[-1]!r}"
        )
    if e.telemetry_reading:
        applied = Decision(
            CommandStatus.APPLIED, ReasonCode.TELEMETRY_MATCHED, detail=e.telemetry_reading
        )
        return _if_acked_first(e, applied)
    ack = _accepted(e)
    if ack is not None and e.status != CommandStatus.ACKNOWLEDGED:
        return Decision(
            CommandStatus.ACKNOWLEDGED, ReasonCode.ACKNOWLEDGED, {"acknowledged_at": ack}
        )
    current = [r for r in e.responses if r[0] == e.attempt]
    if (
        ack is None
        and current
        and e.status == CommandStatus.DISPATCHED
        and current[-1][2] == ResultCode.BUSY
    ):
        return Decision(CommandStatus.RETRYING, ReasonCode.DEVICE_BUSY, retry=True)
    if e.status == CommandStatus.DISPATCHED and e.deadline_at and now >= e.deadline_at:
        return Decision(CommandStatus.RETRYING, ReasonCode.ACK_TIMEOUT, retry=True)
    if (
        e.status == CommandStatus.ACKNOWLEDGED
        and e.acknowledged_at
        and now >= e.acknowledged_at + timedelta(seconds=applied_window_s)
    ):
        return Decision(CommandStatus.UNCERTAIN, ReasonCode.NO_APPLIED_EVIDENCE)
    return None


def _refusal(e: Evidence) -> ReasonCode | None:
    """The reason of a non-transient refusal of the current attempt, if the device sent one."""
    for attempt, status, code, _ in reversed(e.responses):
        if attempt == e.attempt and status == "rejected" and code in _FAILING_CODES:
            return _FAILING_CODES[ResultCode(code)]
    return None


def _accepted(e: Evidence) -> datetime | None:
    return next((at for _, status, _, at in e.responses if status == "accepted"), None)


def _if_acked_first(e: Evidence, applied: Decision) -> Decision:
    """Record the acknowledgement step first when an ack exists, for a readable timeline."""
    ack = _accepted(e)
    if ack is not None and e.status in (CommandStatus.DISPATCHED, CommandStatus.RETRYING):
        return Decision(
            CommandStatus.ACKNOWLEDGED, ReasonCode.ACKNOWLEDGED, {"acknowledged_at": ack}
        )
    return applied


# --- applying it ------------------------------------------------------------------------


def _evidence(intent: AutomationCommandIntent) -> Evidence:
    receipts = list(
        DeviceCommandReceipt.objects.filter(intent=intent, mismatch=False)
        .order_by("received_at", "pk")
        .values_list("receipt_type", "payload", "attempt", "received_at")
    )
    responses = [
        (attempt, payload.get("status", ""), payload.get("resultCode", ""), at)
        for kind, payload, attempt, at in receipts
        if kind in (ReceiptType.RPC_ACK, ReceiptType.RPC_RESULT)
    ]
    states = [
        payload.get("reportedState") or {}
        for kind, payload, _, _ in receipts
        if kind == ReceiptType.STATE_REPORT
    ]
    return Evidence(
        status=intent.status,
        attempt=intent.attempt_count,
        deadline_at=intent.deadline_at,
        acknowledged_at=intent.acknowledged_at,
        param_key=next(iter(intent.command_params), ""),
        target_value=intent.target_value,
        responses=responses,
        states=states,
        telemetry_reading=_telemetry_proof(intent),
        endpoint_key=intent.target_device_endpoint.profile_endpoint.key,
    )


def _telemetry_proof(intent: AutomationCommandIntent) -> str:
    """The first reading of the target received after the request was first published that
    equals the target, described; "" when none. A reading of the value the endpoint already
    reported before the command proves nothing about this command, so then none counts."""
    published = intent.first_dispatched_at or intent.dispatched_at
    if published is None:
        return ""
    if intent.prior_value_at is not None and values_equal(intent.prior_value, intent.target_value):
        return ""
    readings = (
        AutomationEndpointEvent.objects.filter(
            device_instance_endpoint_id=intent.target_device_endpoint_id,
            created_at__gte=published,
            source_telemetry__received_at__gte=published,
        )
        .order_by("pk")
        .values_list("pk", "normalized_value", "source_telemetry__received_at")
    )
    for pk, value, received_at in readings:
        if values_equal(value, intent.target_value):
            return f"reading {pk} ({value!r}) received {received_at.isoformat()}"
    return ""


def command_intent_reconcile(*, intent_id: int, now: datetime | None = None) -> str:
    """Apply every transition the evidence justifies; returns the status reached. An end on
    the device's word starts the pair's cool-down; an applied command lifts it."""
    now = now or timezone.now()
    with transaction.atomic():
        intent = (
            AutomationCommandIntent.objects.select_for_update(of=("self",))
            .select_related("target_device_endpoint__profile_endpoint")
            .filter(pk=intent_id)
            .first()
        )
        if intent is None:
            return ""
        started = intent.status
        evidence = _evidence(intent)
        for _ in range(4):
            evidence = replace(
                evidence,
                status=intent.status,
                attempt=intent.attempt_count,
                deadline_at=intent.deadline_at,
                acknowledged_at=intent.acknowledged_at,
            )
            decision = decide(evidence, now, settings.APPLIED_WINDOW_S)
            if decision is None or not _apply(intent, decision, now):
                break
        if intent.status != started:
            _cooldown_follow(intent, now)
        return intent.status


def _apply(intent: AutomationCommandIntent, decision: Decision, now: datetime) -> bool:
    if decision.reason == ReasonCode.ACK_TIMEOUT:
        deadline = intent.deadline_at.isoformat() if intent.deadline_at else None
        receipt_mark(
            intent,
            ReceiptType.TIMEOUT_MARK,
            {"attempt": intent.attempt_count, "deadlineAt": deadline},
            now,
        )
    if decision.retry:
        return intent_retry_or_expire(intent, decision.reason, now=now)
    fields: dict[str, Any] = dict(decision.fields)
    if decision.to == CommandStatus.APPLIED:
        fields["applied_at"] = now
    return intent_transition(
        intent, decision.to, decision.reason, now=now, detail=decision.detail, **fields
    )


def _cooldown_follow(intent: AutomationCommandIntent, now: datetime) -> None:
    if intent.status in COOLDOWN_STATUSES:
        command_cooldown_record(intent, now=now)
    elif intent.status == CommandStatus.APPLIED:
        command_cooldown_clear(
            endpoint_id=intent.target_device_endpoint_id, value=intent.target_value
        )


def command_intents_overdue(*, now: datetime, limit: int) -> list[int]:
    """Commands past their ack deadline or applied window: timeout handling is due."""
    window = timedelta(seconds=settings.APPLIED_WINDOW_S)
    dispatched = AutomationCommandIntent.objects.filter(
        status=CommandStatus.DISPATCHED, deadline_at__lte=now
    ).values_list("pk", flat=True)[:limit]
    acknowledged = AutomationCommandIntent.objects.filter(
        status=CommandStatus.ACKNOWLEDGED, acknowledged_at__lte=now - window
    ).values_list("pk", flat=True)[:limit]
    return sorted(set(dispatched) | set(acknowledged))[:limit]


def command_intents_awaiting_endpoints(*, endpoint_ids: Sequence[int]) -> list[int]:
    """Commands that new telemetry of these endpoints may prove applied."""
    return list(
        AutomationCommandIntent.objects.filter(
            target_device_endpoint_id__in=list(endpoint_ids),
            status__in=COMMAND_AWAITING_DEVICE,
        ).values_list("pk", flat=True)
    )
