"""What the bridge hands to a Celery task for each device message, one frozen dataclass per
task, built by the bridge and read back by the task. The Celery payload is JSON: each message
travels as a positional list, the shape every bridge so far has sent, so a message queued by
an older bridge still parses."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from django.utils import timezone
from django.utils.dateparse import parse_datetime

# One message as it travels in a task's JSON arguments: a positional row of text and flags
# (the time as ISO text). A task takes a list of them; only this module builds or reads one.
WireRow = list[str | bool]


def decode_payload(payload: bytes) -> tuple[str, bool]:
    """Text and bad_encoding: bytes that are not UTF-8 stay visible as escapes."""
    try:
        return payload.decode("utf-8"), False
    except UnicodeDecodeError:
        return payload.decode("utf-8", "backslashreplace"), True


@dataclass(frozen=True)
class InboundTelemetry:
    """One telemetry message as the bridge (or an HTTP gateway) received it; for the task
    ``TELEMETRY_INGEST``."""

    serial: str
    payload: str
    received_at: datetime
    bad_encoding: bool = False  # payload bytes were not UTF-8; ``payload`` shows them escaped

    @classmethod
    def from_bytes(cls, serial: str, raw: bytes, received_at: datetime) -> InboundTelemetry:
        payload, bad_encoding = decode_payload(raw)
        return cls(serial, payload, received_at, bad_encoding)

    def to_task_arg(self) -> WireRow:
        return [self.serial, self.payload, self.received_at.isoformat(), self.bad_encoding]

    @classmethod
    def from_task_arg(cls, arg: Sequence[str | bool]) -> InboundTelemetry:
        received = parse_datetime(str(arg[2])) or timezone.now()
        bad = bool(arg[3]) if len(arg) > 3 else False
        return cls(serial=str(arg[0]), payload=str(arg[1]), received_at=received, bad_encoding=bad)


@dataclass(frozen=True)
class DeviceMessage:
    """An rpc/response or state message as the bridge received it; for the task
    ``DEVICE_MESSAGES_RECONCILE``."""

    serial: str
    kind: str  # DeviceMessageKind.RPC_RESPONSE or STATE
    payload: str
    received_at: datetime
    bad_encoding: bool = False

    @classmethod
    def from_bytes(cls, serial: str, kind: str, raw: bytes, received_at: datetime) -> DeviceMessage:
        payload, bad_encoding = decode_payload(raw)
        return cls(serial, kind, payload, received_at, bad_encoding)

    def to_task_arg(self) -> WireRow:
        return [
            self.serial,
            self.kind,
            self.payload,
            self.received_at.isoformat(),
            self.bad_encoding,
        ]

    @classmethod
    def from_task_arg(cls, arg: Sequence[str | bool]) -> DeviceMessage:
        received = parse_datetime(str(arg[3])) or timezone.now()
        bad = bool(arg[4]) if len(arg) > 4 else False
        return cls(str(arg[0]), str(arg[1]), str(arg[2]), received, bad)
