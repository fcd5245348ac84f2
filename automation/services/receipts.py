"""Device messages become receipts: every rpc/response and state report is stored once
(unique per message and attempt, so a redelivery is absorbed), or recorded as a rejection
with its reason. A response on another device's topic is kept as a mismatch and moves
nothing. A state report also updates what the endpoints last reported."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from django.db import transaction
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from automation import coordination
from automation.keys import receipt_dedupe_key
from automation.models import DeviceCommand, DeviceCommandReceipt, ReceiptType
from automation.services.evidence import reported_state
from automation.services.receipts_sql import replied_commands_read
from automation.services.rows import as_row
from common.json_types import JsonObject, JsonValue
from common.sql import insert_ignore_returning
from devices.models import DeviceInstanceEndpoint, DeviceMessageKind, DeviceMessageRejection
from devices.mqtt.contract import (
    ContractError,
    RpcResponse,
    StateReport,
    parse_rpc_response,
    parse_state_report,
)
from devices.mqtt.messages import DeviceMessage
from devices.reported import ReportedValue, endpoint_reported_values_update, report_value
from devices.services.rejections import device_message_rejections_record, printable
from devices.timestamps import device_time_detail, device_time_violation
from devices.values import value_has_type


@dataclass(frozen=True)
class ReceiptRow:
    """A ``DeviceCommandReceipt`` as a batch inserts it (foreign keys by id)."""

    command: int
    device: int | None  # None for a mismatch: the message came from another device
    serial_number: str
    receipt_type: str  # a ReceiptType value
    payload: JsonObject  # the parsed message, which the contract checked is an object
    correlation_key: str
    dedupe_key: str
    attempt: int
    mismatch: bool
    received_at: datetime


def _parse(message: DeviceMessage) -> RpcResponse | StateReport:
    if message.bad_encoding:
        raise ContractError("invalid_encoding", "payload is not valid UTF-8")  # type: ignore[arg-type]
    raw = message.payload.encode("utf-8", "surrogatepass")
    if message.kind == DeviceMessageKind.RPC_RESPONSE:
        return parse_rpc_response(raw)
    if message.kind == DeviceMessageKind.STATE:
        return parse_state_report(raw)
    raise ContractError("invalid_field", f"unknown message kind {message.kind!r}")  # type: ignore[arg-type]


def _storable(document: JsonValue) -> bool:
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
        serial_number=printable(message.serial[:200]),
        kind=kind,
        raw_payload=printable(message.payload[:65536]),
        reason_code=reason,
        detail=printable(detail[:500]),
        received_at=message.received_at,
    )


def _commands_by_command_id(
    command_ids: set[str], *, endpoints: bool
) -> tuple[dict[str, DeviceCommand], dict[int, list[DeviceInstanceEndpoint]]]:
    """The commands the replies name, by commandId, and (with ``endpoints``) their devices'
    endpoints by device id. The correlation cache names most by id; the rest, and any whose
    cached id turns out to be another command's, are read by commandId."""
    cached = coordination.correlation_lookup(sorted(command_ids))
    reads = (
        replied_commands_read("id", sorted(set(cached.values())), endpoints=endpoints)
        if cached
        else []
    )
    found = {
        r.command.device_command_id or "": r
        for r in reads
        if r.command.device_command_id in command_ids
    }
    missing = command_ids - set(found)
    if missing:
        for read in replied_commands_read(
            "device_command_id", sorted(missing), endpoints=endpoints
        ):
            found[read.command.device_command_id or ""] = read
    commands = {command_id: r.command for command_id, r in found.items()}
    by_device = {r.command.target_device_id: r.endpoints for r in found.values()}
    return commands, by_device


def device_messages_record(*, messages: Sequence[DeviceMessage]) -> list[int]:
    """Store each response or state report as a receipt (once), or a rejection with its
    reason; returns the commands whose evidence changed. A message whose topic serial is not
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
    commands, endpoints = _commands_by_command_id(
        {p.command_id for _, p in parsed},
        endpoints=any(isinstance(p, StateReport) for _, p in parsed),
    )
    rows: list[ReceiptRow] = []
    for message, body in parsed:
        command = commands.get(body.command_id)
        if command is None:
            rejections.append(_reject(message, "unknown_command", f"commandId {body.command_id}"))
            continue
        rows.append(_receipt_row(message, body, command))
    with transaction.atomic():
        inserted = insert_ignore_returning(
            DeviceCommandReceipt, [as_row(r) for r in rows], ("command", "mismatch", "dedupe_key")
        )
        device_message_rejections_record(rejections=rejections)
        fresh = {key for _, mismatch, key in inserted if not mismatch}
        _reported_state_record([r for r in rows if r.dedupe_key in fresh], commands, endpoints)
    return sorted({pk for pk, mismatch, _ in inserted if not mismatch})


def _reported_state_record(
    rows: Sequence[ReceiptRow],
    commands: dict[str, DeviceCommand],
    endpoints: dict[int, list[DeviceInstanceEndpoint]],
) -> None:
    """A state report says what the device holds now: its values become the endpoints'
    reported values (newest by ``appliedAt``), as telemetry's do, so the next decision knows
    the command's effect before the device's next telemetry arrives. ``endpoints`` are the
    commands' devices' (read with the commands)."""
    reports = [
        (commands[r.correlation_key].target_device_id, r.payload)
        for r in rows
        if r.receipt_type == ReceiptType.STATE_REPORT
    ]
    if not reports:
        return
    readings: list[ReportedValue] = []
    for device_id, payload in reports:
        applied_at = parse_datetime(str(payload.get("appliedAt", "")))
        state = reported_state(payload)
        if applied_at is None:
            continue
        for endpoint in endpoints.get(device_id, []):
            found, value = report_value(
                state, param_key=endpoint.rpc_param_key, endpoint_key=endpoint.profile_endpoint.key
            )
            if found and value_has_type(endpoint.profile_endpoint.data_type, value):
                readings.append(ReportedValue(endpoint.pk, value, applied_at))
    endpoint_reported_values_update(readings=readings)


def _receipt_row(
    message: DeviceMessage, body: RpcResponse | StateReport, command: DeviceCommand
) -> ReceiptRow:
    if isinstance(body, RpcResponse):
        kind = ReceiptType.RPC_ACK if body.accepted else ReceiptType.RPC_RESULT
    else:
        kind = ReceiptType.STATE_REPORT
    mismatch = message.serial != command.target_serial_number
    return ReceiptRow(
        command=command.pk,
        device=None if mismatch else command.target_device_id,
        serial_number=message.serial[:64],
        receipt_type=kind.value,
        payload=json.loads(message.payload),
        correlation_key=body.command_id,
        dedupe_key=receipt_dedupe_key(
            serial=message.serial,
            kind=message.kind,
            payload=message.payload,
            attempt=command.attempt_count,
        ),
        attempt=command.attempt_count,
        mismatch=mismatch,
        received_at=message.received_at,
    )
