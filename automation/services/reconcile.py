"""Reconciliation: device messages become receipts, and receipts (plus deadlines and
telemetry) decide where a command stands.

``applied`` is reached only with evidence: a state report for the commandId whose reported
value matches, or telemetry of the target endpoint equal to the target after dispatch. The
decision reads the whole receipt set under the intent's row lock, so the order in which a
reply and the dispatcher's own commit arrive cannot lose a transition, and a duplicate
receipt is absorbed by its unique key before it is ever read.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import transaction
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from automation import coordination
from automation.keys import receipt_dedupe_key
from automation.models import (
    AutomationCommandIntent,
    AutomationEndpointEvent,
    DeviceCommandReceipt,
    ReceiptType,
)
from automation.operators import values_equal
from automation.services.commands import intent_retry_or_expire, intent_transition, receipt_mark
from automation.states import COMMAND_AWAITING_DEVICE, CommandStatus, ReasonCode
from config.sql import insert_ignore_returning
from devices.models import DeviceMessageKind, DeviceMessageRejection
from devices.mqtt.contract import (
    ContractError,
    ResultCode,
    RpcResponse,
    StateReport,
    parse_rpc_response,
    parse_state_report,
)
from devices.services import device_message_rejections_record
from devices.timestamps import device_time_detail, device_time_violation

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
    telemetry_matched: bool = False


@dataclass(frozen=True)
class Decision:
    to: CommandStatus
    reason: ReasonCode
    fields: dict[str, Any] = field(default_factory=dict)
    retry: bool = False  # a transient failure: retry or expire by the budget


def decide(e: Evidence, now: datetime, applied_window_s: float) -> Decision | None:
    """The next transition the evidence justifies, or None. Called repeatedly until None,
    so dispatched + ack + matching state walks dispatched → acknowledged → applied."""
    if e.status not in COMMAND_AWAITING_DEVICE:
        return None
    reported = [s[e.param_key] for s in e.states if e.param_key in s]
    if any(values_equal(v, e.target_value) for v in reported):
        return _if_acked_first(e, Decision(CommandStatus.APPLIED, ReasonCode.STATE_REPORTED))
    if e.telemetry_matched:
        return _if_acked_first(e, Decision(CommandStatus.APPLIED, ReasonCode.TELEMETRY_MATCHED))
    codes = {code for _, _, code, _ in e.responses}
    if reported:  # every report contradicts the desired state
        to = CommandStatus.FAILED if ResultCode.HARDWARE_FAULT in codes else CommandStatus.UNCERTAIN
        return Decision(to, ReasonCode.STATE_MISMATCH)
    ack = _accepted(e)
    if ack is not None and e.status != CommandStatus.ACKNOWLEDGED:
        return Decision(
            CommandStatus.ACKNOWLEDGED, ReasonCode.ACKNOWLEDGED, {"acknowledged_at": ack}
        )
    current = [r for r in e.responses if r[0] == e.attempt]
    if ack is None and current and e.status == CommandStatus.DISPATCHED:
        code = current[-1][2]
        if code == ResultCode.BUSY:
            return Decision(CommandStatus.RETRYING, ReasonCode.DEVICE_BUSY, retry=True)
        if code in _FAILING_CODES:
            return Decision(CommandStatus.FAILED, _FAILING_CODES[ResultCode(code)])
    if e.status == CommandStatus.DISPATCHED and e.deadline_at and now >= e.deadline_at:
        return Decision(CommandStatus.RETRYING, ReasonCode.ACK_TIMEOUT, retry=True)
    if (
        e.status == CommandStatus.ACKNOWLEDGED
        and e.acknowledged_at
        and now >= e.acknowledged_at + timedelta(seconds=applied_window_s)
    ):
        return Decision(CommandStatus.UNCERTAIN, ReasonCode.NO_APPLIED_EVIDENCE)
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
    matched = False
    if intent.dispatched_at is not None:
        first_dispatch = (
            intent.transitions.filter(to_status=CommandStatus.DISPATCHED)
            .order_by("at")
            .values_list("at", flat=True)
            .first()
        ) or intent.dispatched_at
        values = AutomationEndpointEvent.objects.filter(
            device_instance_endpoint_id=intent.target_device_endpoint_id,
            created_at__gte=first_dispatch,
        ).values_list("normalized_value", flat=True)
        matched = any(values_equal(v, intent.target_value) for v in values)
    return Evidence(
        status=intent.status,
        attempt=intent.attempt_count,
        deadline_at=intent.deadline_at,
        acknowledged_at=intent.acknowledged_at,
        param_key=next(iter(intent.command_params), ""),
        target_value=intent.target_value,
        responses=responses,
        states=states,
        telemetry_matched=matched,
    )


def command_intent_reconcile(*, intent_id: int, now: datetime | None = None) -> str:
    """Apply every transition the evidence justifies; returns the status reached."""
    now = now or timezone.now()
    with transaction.atomic():
        intent = AutomationCommandIntent.objects.select_for_update().filter(pk=intent_id).first()
        if intent is None:
            return ""
        for _ in range(4):
            decision = decide(_evidence(intent), now, settings.APPLIED_WINDOW_S)
            if decision is None:
                break
            if decision.reason == ReasonCode.ACK_TIMEOUT:
                receipt_mark(
                    intent,
                    ReceiptType.TIMEOUT_MARK,
                    {
                        "attempt": intent.attempt_count,
                        "deadlineAt": intent.deadline_at.isoformat()
                        if intent.deadline_at
                        else None,
                    },
                    now,
                )
            if decision.retry:
                moved = intent_retry_or_expire(intent, decision.reason, now=now)
            else:
                fields: dict[str, Any] = dict(decision.fields)
                if decision.to == CommandStatus.APPLIED:
                    fields["applied_at"] = now
                moved = intent_transition(intent, decision.to, decision.reason, now=now, **fields)
            if not moved:
                break
        return intent.status


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


# --- recording device messages ----------------------------------------------------------


@dataclass(frozen=True)
class DeviceMessage:
    """An rpc/response or state message as the bridge received it."""

    serial: str
    kind: str  # DeviceMessageKind.RPC_RESPONSE or STATE
    payload: str
    received_at: datetime
    bad_encoding: bool = False

    @classmethod
    def from_task_arg(cls, arg: Sequence[Any]) -> DeviceMessage:
        received = parse_datetime(str(arg[3])) or timezone.now()
        bad = bool(arg[4]) if len(arg) > 4 else False
        return cls(str(arg[0]), str(arg[1]), str(arg[2]), received, bad)

    def as_task_arg(self) -> list[Any]:
        return [
            self.serial,
            self.kind,
            self.payload,
            self.received_at.isoformat(),
            self.bad_encoding,
        ]


def _parse(message: DeviceMessage) -> RpcResponse | StateReport:
    if message.bad_encoding:
        raise ContractError("invalid_encoding", "payload is not valid UTF-8")  # type: ignore[arg-type]
    raw = message.payload.encode("utf-8", "surrogatepass")
    if message.kind == DeviceMessageKind.RPC_RESPONSE:
        return parse_rpc_response(raw)
    if message.kind == DeviceMessageKind.STATE:
        return parse_state_report(raw)
    raise ContractError("invalid_field", f"unknown message kind {message.kind!r}")  # type: ignore[arg-type]


def _printable(text: str) -> str:
    """Text a database can store: NUL and lone surrogates kept visible as escapes."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8").replace("\x00", "\\x00")


def _storable(document: Any) -> bool:
    """False when a string (key or value) holds NUL (no jsonb/text column stores it) or a lone
    surrogate (no driver encodes it). Iterative: a parsed document may be deeply nested."""
    stack = [document]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
        elif isinstance(item, str):
            if "\x00" in item:
                return False
            try:
                item.encode("utf-8")
            except UnicodeEncodeError:
                return False
    return True


def _reject(message: DeviceMessage, reason: str, detail: str) -> DeviceMessageRejection:
    kind = message.kind if message.kind in DeviceMessageKind.values else DeviceMessageKind.STATE
    return DeviceMessageRejection(
        serial_number=_printable(message.serial[:200]),
        kind=kind,
        raw_payload=_printable(message.payload[:65536]),
        reason_code=reason,
        detail=_printable(detail[:500]),
        received_at=message.received_at,
    )


def _intents_by_command(command_ids: set[str]) -> dict[str, AutomationCommandIntent]:
    cached = coordination.correlation_lookup(sorted(command_ids))
    rows = AutomationCommandIntent.objects.filter(pk__in=set(cached.values())) if cached else []
    found = {i.device_command_id or "": i for i in rows if i.device_command_id in command_ids}
    missing = command_ids - set(found)
    if missing:
        for intent in AutomationCommandIntent.objects.filter(device_command_id__in=missing):
            found[intent.device_command_id or ""] = intent
    return found


def device_messages_record(*, messages: Sequence[DeviceMessage]) -> list[int]:
    """Store each response or state report as a receipt (once), or a rejection with its
    reason; returns the intents whose evidence changed. A message whose topic serial is not
    the command's target is kept as a mismatch receipt and moves nothing."""
    now = timezone.now()
    parsed: list[tuple[DeviceMessage, RpcResponse | StateReport]] = []
    rejections: list[DeviceMessageRejection] = []
    for message in messages:
        try:
            parsed.append((message, _parse(message)))
        except ContractError as exc:
            rejections.append(_reject(message, str(exc.reason_code), exc.detail))
            continue
        if not _storable(message.serial) or not _storable(json.loads(message.payload)):
            parsed.pop()
            detail = "NUL or a lone surrogate cannot be stored"
            rejections.append(_reject(message, "invalid_field", detail))
        elif isinstance(body := parsed[-1][1], StateReport) and (
            clock := device_time_violation(body.applied_at, now)
        ):  # an appliedAt outside the device-time bounds is no evidence
            parsed.pop()
            detail = device_time_detail("appliedAt", body.applied_at, now)
            rejections.append(_reject(message, clock, detail))
    intents = _intents_by_command({p.command_id for _, p in parsed})
    rows: list[dict[str, Any]] = []
    for message, body in parsed:
        intent = intents.get(body.command_id)
        if intent is None:
            rejections.append(_reject(message, "unknown_command", f"commandId {body.command_id}"))
            continue
        rows.append(_receipt_row(message, body, intent))
    with transaction.atomic():
        inserted = insert_ignore_returning(DeviceCommandReceipt, rows, ("intent", "mismatch"))
        device_message_rejections_record(rejections=rejections)
    return sorted({intent_id for intent_id, mismatch in inserted if not mismatch})


def _receipt_row(
    message: DeviceMessage, body: RpcResponse | StateReport, intent: AutomationCommandIntent
) -> dict[str, Any]:
    if isinstance(body, RpcResponse):
        kind = ReceiptType.RPC_ACK if body.accepted else ReceiptType.RPC_RESULT
    else:
        kind = ReceiptType.STATE_REPORT
    mismatch = message.serial != intent.target_serial_number
    return {
        "intent": intent.pk,
        "device": None if mismatch else intent.target_device_id,
        "serial_number": message.serial[:64],
        "receipt_type": kind.value,
        "payload": json.loads(message.payload),
        "correlation_key": body.command_id,
        "dedupe_key": receipt_dedupe_key(
            serial=message.serial,
            kind=message.kind,
            payload=message.payload,
            attempt=intent.attempt_count,
        ),
        "attempt": intent.attempt_count,
        "mismatch": mismatch,
        "received_at": message.received_at,
    }
