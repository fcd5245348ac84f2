"""The firmware contract (docs/spec.md §3.7): topic names and payloads, validated at the edge.

Pure module (no database, no MQTT client): every payload that crosses the broker is built
here and every payload that arrives is parsed here into a frozen dataclass, or rejected
with a :class:`ContractError` whose reason code is an enum. A parser never raises anything
else, whatever the bytes, so a malformed device message can be recorded and dropped
without crashing the bridge or the simulator. JSON nests at most ``JSON_MAX_DEPTH`` levels
either way (``common.validators``, the bound every JSON field of the API has too).
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

from common.validators import JSON_MAX_DEPTH, json_bounds_violation

MAX_PAYLOAD_BYTES = 64 * 1024
COMMAND_ID_MAX_CHARS = 40
METHOD_MAX_CHARS = 64  # DeviceProfileEndpoint.rpc_method max_length
TOPIC_ROOT = "devices"

# Printable ASCII without spaces: commandIds are echoed in topics, logs and firmware buffers.
_COMMAND_ID_RE = re.compile(rf"[\x21-\x7e]{{1,{COMMAND_ID_MAX_CHARS}}}")
_SERIAL_FORBIDDEN = frozenset("/+#\x00")


class TopicKind(StrEnum):
    TELEMETRY = "telemetry"
    RPC_REQUEST = "rpc_request"
    RPC_RESPONSE = "rpc_response"
    STATE = "state"


_SUFFIX_BY_KIND = {
    TopicKind.TELEMETRY: "telemetry",
    TopicKind.RPC_REQUEST: "rpc/request",
    TopicKind.RPC_RESPONSE: "rpc/response",
    TopicKind.STATE: "state",
}
_KIND_BY_SUFFIX = {suffix: kind for kind, suffix in _SUFFIX_BY_KIND.items()}

# Subscriptions for a backend that listens to every device (prefix with $share/<group>/).
TELEMETRY_SUBSCRIPTION = f"{TOPIC_ROOT}/+/telemetry"
RPC_RESPONSE_SUBSCRIPTION = f"{TOPIC_ROOT}/+/rpc/response"
STATE_SUBSCRIPTION = f"{TOPIC_ROOT}/+/state"


class ContractReason(StrEnum):
    """Why a payload was refused; stored with the dropped message."""

    INVALID_ENCODING = "invalid_encoding"
    INVALID_JSON = "invalid_json"
    JSON_TOO_DEEP = "json_too_deep"
    NOT_AN_OBJECT = "not_an_object"
    MISSING_FIELD = "missing_field"
    INVALID_FIELD = "invalid_field"
    INVALID_TIMESTAMP = "invalid_timestamp"
    PAYLOAD_TOO_LARGE = "payload_too_large"


class ContractError(ValueError):
    """A payload (or a payload being built) that breaks the contract."""

    def __init__(self, reason_code: ContractReason, detail: str) -> None:
        super().__init__(f"{reason_code}: {detail}")
        self.reason_code = ContractReason(reason_code)
        self.detail = detail


class RpcStatus(StrEnum):
    ACCEPTED = "accepted"
    REJECTED = "rejected"


class ResultCode(StrEnum):
    OK = "ok"
    BUSY = "busy"
    INVALID_PARAM = "invalid_param"
    HARDWARE_FAULT = "hardware_fault"
    NOT_SUPPORTED = "not_supported"


# ---------------------------------------------------------------------------------------
# Topics


def _check_serial(serial: str) -> str:
    if not isinstance(serial, str) or not serial or _SERIAL_FORBIDDEN & set(serial):
        raise ValueError(f"serial {serial!r} cannot be used in a topic")
    return serial


def device_topic(serial: str, kind: TopicKind | str) -> str:
    return f"{TOPIC_ROOT}/{_check_serial(serial)}/{_SUFFIX_BY_KIND[TopicKind(kind)]}"


def telemetry_topic(serial: str) -> str:
    return device_topic(serial, TopicKind.TELEMETRY)


def rpc_request_topic(serial: str) -> str:
    return device_topic(serial, TopicKind.RPC_REQUEST)


def rpc_response_topic(serial: str) -> str:
    return device_topic(serial, TopicKind.RPC_RESPONSE)


def state_topic(serial: str) -> str:
    return device_topic(serial, TopicKind.STATE)


def parse_topic(topic: str) -> tuple[str, TopicKind] | None:
    """``devices/<serial>/<kind>`` -> (serial, kind); None for any other topic."""
    parts = topic.split("/")
    if len(parts) not in (3, 4) or parts[0] != TOPIC_ROOT:
        return None
    serial = parts[1]
    if not serial or _SERIAL_FORBIDDEN & set(serial):
        return None
    kind = _KIND_BY_SUFFIX.get("/".join(parts[2:]))
    return None if kind is None else (serial, kind)


# ---------------------------------------------------------------------------------------
# Times


def format_timestamp(value: datetime) -> str:
    """UTC ISO-8601 with ``Z``; microseconds only when present."""
    if not isinstance(value, datetime) or value.utcoffset() is None:
        raise ContractError(ContractReason.INVALID_TIMESTAMP, f"{value!r} is not an aware datetime")
    return value.astimezone(UTC).isoformat().replace("+00:00", "Z")


def parse_timestamp(raw: object, name: str) -> datetime:
    """ISO-8601 with ``Z`` or an offset -> aware UTC datetime; naive times are refused."""
    if not isinstance(raw, str) or not raw or len(raw) > 64:
        raise ContractError(ContractReason.INVALID_TIMESTAMP, f"{name} must be an ISO-8601 string")
    try:
        parsed = datetime.fromisoformat(raw)
        if parsed.utcoffset() is None:
            raise ContractError(ContractReason.INVALID_TIMESTAMP, f"{name} has no UTC offset")
        return parsed.astimezone(UTC)
    except (ValueError, OverflowError) as exc:
        if isinstance(exc, ContractError):
            raise
        raise ContractError(ContractReason.INVALID_TIMESTAMP, f"{name}: {exc}") from None


# ---------------------------------------------------------------------------------------
# Field checks (shared by constructors and parsers)


def _check_command_id(value: object) -> str:
    if not isinstance(value, str) or not _COMMAND_ID_RE.fullmatch(value):
        raise ContractError(
            ContractReason.INVALID_FIELD,
            f"commandId must be 1-{COMMAND_ID_MAX_CHARS} printable ASCII characters",
        )
    return value


def _check_aware(value: object, name: str) -> datetime:
    if not isinstance(value, datetime) or value.utcoffset() is None:
        raise ContractError(ContractReason.INVALID_TIMESTAMP, f"{name} must be an aware datetime")
    return value.astimezone(UTC)


def _check_object(value: object, name: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ContractError(ContractReason.INVALID_FIELD, f"{name} must be a JSON object")
    return value


def _check_enum(enum: type[StrEnum], value: object, name: str) -> Any:
    try:
        return enum(value)  # type: ignore[arg-type]  # checking arbitrary input is the point
    except (ValueError, TypeError):
        allowed = "/".join(member.value for member in enum)
        raise ContractError(ContractReason.INVALID_FIELD, f"{name} must be {allowed}") from None


def _check_depth(document: object) -> None:
    violation = json_bounds_violation(document, max_bytes=None)  # bytes are bounded apart
    if violation is not None:
        raise ContractError(ContractReason.JSON_TOO_DEEP, violation.message)


def _dumps(document: dict[str, Any]) -> bytes:
    _check_depth(document)
    try:
        raw = json.dumps(document, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise ContractError(ContractReason.INVALID_FIELD, f"not serialisable: {exc}") from None
    encoded = raw.encode("utf-8")
    if len(encoded) > MAX_PAYLOAD_BYTES:
        raise ContractError(ContractReason.PAYLOAD_TOO_LARGE, f"{len(encoded)} bytes")
    return encoded


# ---------------------------------------------------------------------------------------
# Payloads


@dataclass(frozen=True)
class RpcRequest:
    """backend -> device on ``devices/{serial}/rpc/request``."""

    command_id: str
    method: str
    params: dict[str, Any]
    sent_at: datetime
    deadline_at: datetime

    def __post_init__(self) -> None:
        _check_command_id(self.command_id)
        if not isinstance(self.method, str) or not 0 < len(self.method) <= METHOD_MAX_CHARS:
            raise ContractError(
                ContractReason.INVALID_FIELD, f"method must be 1-{METHOD_MAX_CHARS} characters"
            )
        _check_object(self.params, "params")
        object.__setattr__(self, "sent_at", _check_aware(self.sent_at, "sentAt"))
        object.__setattr__(self, "deadline_at", _check_aware(self.deadline_at, "deadlineAt"))

    def to_json(self) -> bytes:
        return _dumps(
            {
                "commandId": self.command_id,
                "method": self.method,
                "params": self.params,
                "sentAt": format_timestamp(self.sent_at),
                "deadlineAt": format_timestamp(self.deadline_at),
            }
        )


@dataclass(frozen=True)
class RpcResponse:
    """device -> backend on ``devices/{serial}/rpc/response``.

    ``accepted`` always carries ``ok`` and ``rejected`` never does: a contradictory pair is
    refused here rather than guessed at by the reconciler.
    """

    command_id: str
    status: RpcStatus
    result_code: ResultCode
    message: str | None = None

    def __post_init__(self) -> None:
        _check_command_id(self.command_id)
        status = _check_enum(RpcStatus, self.status, "status")
        code = _check_enum(ResultCode, self.result_code, "resultCode")
        if (status is RpcStatus.ACCEPTED) != (code is ResultCode.OK):
            raise ContractError(
                ContractReason.INVALID_FIELD, f"status {status} contradicts resultCode {code}"
            )
        if self.message is not None and not isinstance(self.message, str):
            raise ContractError(ContractReason.INVALID_FIELD, "message must be a string or null")
        object.__setattr__(self, "status", status)
        object.__setattr__(self, "result_code", code)

    @property
    def accepted(self) -> bool:
        return self.status is RpcStatus.ACCEPTED

    def to_json(self) -> bytes:
        return _dumps(
            {
                "commandId": self.command_id,
                "status": self.status.value,
                "resultCode": self.result_code.value,
                "message": self.message,
            }
        )


@dataclass(frozen=True)
class StateReport:
    """device -> backend on ``devices/{serial}/state``: the evidence that a command applied."""

    command_id: str
    reported_state: dict[str, Any]
    applied_at: datetime

    def __post_init__(self) -> None:
        _check_command_id(self.command_id)
        _check_object(self.reported_state, "reportedState")
        object.__setattr__(self, "applied_at", _check_aware(self.applied_at, "appliedAt"))

    def to_json(self) -> bytes:
        return _dumps(
            {
                "commandId": self.command_id,
                "reportedState": self.reported_state,
                "appliedAt": format_timestamp(self.applied_at),
            }
        )


def telemetry_payload(ts: datetime, values: dict[str, Any]) -> bytes:
    """device -> backend on ``devices/{serial}/telemetry``."""
    return _dumps({"ts": format_timestamp(ts), "values": _check_object(values, "values")})


# ---------------------------------------------------------------------------------------
# Parsers


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):  # 1e999 overflows to inf: refuse it like NaN
        raise ValueError(f"{text[:20]} is not a finite number")
    return value


def _load_object(raw: bytes | bytearray) -> dict[str, Any]:
    if len(raw) > MAX_PAYLOAD_BYTES:
        raise ContractError(
            ContractReason.PAYLOAD_TOO_LARGE, f"{len(raw)} bytes > {MAX_PAYLOAD_BYTES}"
        )
    try:
        text = bytes(raw).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ContractError(ContractReason.INVALID_ENCODING, f"not UTF-8: {exc.reason}") from None
    try:
        document = json.loads(text, parse_constant=_reject_constant, parse_float=_finite_float)
    except RecursionError:
        detail = f"nested deeper than {JSON_MAX_DEPTH} levels"
        raise ContractError(ContractReason.JSON_TOO_DEEP, detail) from None
    except ValueError as exc:
        raise ContractError(ContractReason.INVALID_JSON, str(exc)[:200]) from None
    _check_depth(document)
    if not isinstance(document, dict):
        raise ContractError(ContractReason.NOT_AN_OBJECT, f"top level is {type(document).__name__}")
    return document


def _require(document: dict[str, Any], *names: str) -> None:
    missing = [name for name in names if name not in document]
    if missing:
        raise ContractError(ContractReason.MISSING_FIELD, ", ".join(missing))


def parse_rpc_request(raw: bytes | bytearray) -> RpcRequest:
    document = _load_object(raw)
    _require(document, "commandId", "method", "params", "sentAt", "deadlineAt")
    return RpcRequest(
        command_id=_check_command_id(document["commandId"]),
        method=document["method"],
        params=_check_object(document["params"], "params"),
        sent_at=parse_timestamp(document["sentAt"], "sentAt"),
        deadline_at=parse_timestamp(document["deadlineAt"], "deadlineAt"),
    )


def parse_rpc_response(raw: bytes | bytearray) -> RpcResponse:
    document = _load_object(raw)
    _require(document, "commandId", "status", "resultCode")
    return RpcResponse(
        command_id=_check_command_id(document["commandId"]),
        status=_check_enum(RpcStatus, document["status"], "status"),
        result_code=_check_enum(ResultCode, document["resultCode"], "resultCode"),
        message=document.get("message"),
    )


def parse_state_report(raw: bytes | bytearray) -> StateReport:
    document = _load_object(raw)
    _require(document, "commandId", "reportedState", "appliedAt")
    return StateReport(
        command_id=_check_command_id(document["commandId"]),
        reported_state=_check_object(document["reportedState"], "reportedState"),
        applied_at=parse_timestamp(document["appliedAt"], "appliedAt"),
    )
