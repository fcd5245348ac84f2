"""Telemetry ingestion: validate, persist, normalise into endpoint events. Set-based per batch
(one INSERT … ON CONFLICT DO NOTHING per table), never evaluating or dispatching inline."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.db import transaction
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from automation.keys import event_dedupe_key, telemetry_fingerprint
from automation.models import AutomationEndpointEvent
from automation.states import EventStatus
from devices.models import (
    Device,
    DeviceInstanceEndpoint,
    DeviceStatus,
    Telemetry,
    TelemetryRejection,
)
from devices.models import TelemetryRejectionReason as Reason
from devices.values import value_has_type

logger = logging.getLogger(__name__)

MAX_TELEMETRY_BYTES = 64 * 1024


@dataclass(frozen=True)
class InboundTelemetry:
    """One telemetry message as the bridge (or an HTTP gateway) received it."""

    serial: str
    payload: str
    received_at: datetime
    bad_encoding: bool = False  # payload bytes were not UTF-8; ``payload`` shows them escaped

    @classmethod
    def from_bytes(cls, serial: str, raw: bytes, received_at: datetime) -> InboundTelemetry:
        try:
            return cls(serial, raw.decode("utf-8"), received_at)
        except UnicodeDecodeError:
            return cls(serial, raw.decode("utf-8", "backslashreplace"), received_at, True)

    def as_task_arg(self) -> list[Any]:
        return [self.serial, self.payload, self.received_at.isoformat(), self.bad_encoding]

    @classmethod
    def from_task_arg(cls, arg: Sequence[Any]) -> InboundTelemetry:
        received = parse_datetime(str(arg[2])) or timezone.now()
        bad = bool(arg[3]) if len(arg) > 3 else False
        return cls(serial=str(arg[0]), payload=str(arg[1]), received_at=received, bad_encoding=bad)


class Rejected(Exception):
    def __init__(self, reason: Reason, detail: str = "") -> None:
        super().__init__(detail)
        self.reason = reason
        self.detail = detail


@dataclass(frozen=True)
class _Parsed:
    message: InboundTelemetry
    device: Device
    ts: datetime
    values: dict[str, Any]
    fingerprint: str


@dataclass
class IngestResult:
    telemetry: int = 0
    events: int = 0
    rejections: int = 0
    pending_event_ids: list[int] = field(default_factory=list)


def _parse_body(payload: str, received_at: datetime) -> tuple[datetime, dict[str, Any]]:
    if len(payload.encode("utf-8", "surrogatepass")) > MAX_TELEMETRY_BYTES:
        raise Rejected(Reason.PAYLOAD_TOO_LARGE, f"more than {MAX_TELEMETRY_BYTES} bytes")
    try:
        body = json.loads(payload)
    except (ValueError, RecursionError) as exc:
        raise Rejected(Reason.INVALID_JSON, str(exc)[:200]) from None
    if not isinstance(body, dict):
        raise Rejected(Reason.NOT_AN_OBJECT, type(body).__name__)
    values = body.get("values")
    if not isinstance(values, dict):
        raise Rejected(Reason.MISSING_VALUES, "payload has no 'values' object")
    raw_ts = body.get("ts")
    if raw_ts is None:
        return received_at, values
    try:
        ts = parse_datetime(raw_ts) if isinstance(raw_ts, str) else None
    except ValueError:
        ts = None
    if ts is None or ts.tzinfo is None:
        raise Rejected(Reason.INVALID_TIMESTAMP, f"ts={raw_ts!r} is not an ISO-8601 UTC time")
    return ts, values


def _printable(text: str) -> str:
    """Text columns (PostgreSQL) cannot hold NUL; keep it visible instead of failing the batch."""
    return text.replace("\x00", "\\x00")


def _rejection(message: InboundTelemetry, reason: Reason, detail: str = "") -> TelemetryRejection:
    return TelemetryRejection(
        serial_number=_printable(message.serial[:200]),
        raw_payload=_printable(message.payload[:MAX_TELEMETRY_BYTES]),
        reason_code=reason,
        detail=_printable(detail[:500]),
        received_at=message.received_at,
    )


def _validate(
    messages: Sequence[InboundTelemetry], devices: dict[str, Device]
) -> tuple[list[_Parsed], list[TelemetryRejection]]:
    parsed: list[_Parsed] = []
    rejections: list[TelemetryRejection] = []
    for message in messages:
        device = devices.get(message.serial)
        try:
            if device is None:
                raise Rejected(Reason.UNKNOWN_DEVICE, "no device with this serial number")
            if device.status == DeviceStatus.RETIRED:
                raise Rejected(Reason.DEVICE_RETIRED, "device is retired")
            if message.bad_encoding:
                raise Rejected(Reason.INVALID_ENCODING, "payload is not valid UTF-8")
            ts, values = _parse_body(message.payload, message.received_at)
        except Rejected as exc:
            rejections.append(_rejection(message, exc.reason, exc.detail))
            continue
        fingerprint = telemetry_fingerprint(message.payload)
        parsed.append(_Parsed(message, device, ts, values, fingerprint))
    return parsed, rejections


def telemetry_ingest(
    *,
    messages: Sequence[InboundTelemetry],
    on_events: Callable[[list[int]], None] | None = None,
) -> IngestResult:
    """Persist a batch of telemetry; ``on_events`` receives pending event ids after commit.

    Idempotent: a redelivered message inserts nothing new, and its still-pending events are
    handed on again (evaluation is idempotent too), so a crash between commit and hand-off
    only delays work.
    """
    serials = {m.serial for m in messages if "\x00" not in m.serial}
    devices = {
        d.serial_number: d
        for d in Device.objects.filter(serial_number__in=serials).select_related("farm")
    }
    parsed, rejections = _validate(messages, devices)
    endpoints: dict[tuple[int, str], DeviceInstanceEndpoint] = {
        (e.device_id, e.profile_endpoint.key): e
        for e in DeviceInstanceEndpoint.objects.filter(
            device_id__in={p.device.pk for p in parsed}
        ).select_related("profile_endpoint")
    }
    result = IngestResult(rejections=len(rejections))
    now = timezone.now()
    with transaction.atomic():
        telemetry_ids = _persist_telemetry(parsed)
        events, value_rejections = _build_events(parsed, endpoints, telemetry_ids, now)
        rejections.extend(value_rejections)
        AutomationEndpointEvent.objects.bulk_create(events, ignore_conflicts=True)
        if rejections:
            TelemetryRejection.objects.bulk_create(rejections)
        _touch_devices(parsed, now)
        _update_last_values(events, endpoints)
        result.telemetry = len(telemetry_ids)
        result.events = len(events)
        result.rejections = len(rejections)
        result.pending_event_ids = list(
            AutomationEndpointEvent.objects.filter(
                dedupe_key__in=[e.dedupe_key for e in events],
                processing_status=EventStatus.PENDING,
            ).values_list("pk", flat=True)
        )
        if on_events is not None and result.pending_event_ids:
            ids = result.pending_event_ids
            transaction.on_commit(lambda: on_events(ids))
    return result


def _persist_telemetry(parsed: Sequence[_Parsed]) -> dict[tuple[int, str], int]:
    rows = {
        (p.device.pk, p.fingerprint): Telemetry(
            device=p.device,
            raw_payload=p.message.payload,
            fingerprint=p.fingerprint,
            message_ts=p.ts,
            received_at=p.message.received_at,
        )
        for p in parsed
    }
    if not rows:
        return {}
    Telemetry.objects.bulk_create(list(rows.values()), ignore_conflicts=True)
    return {
        (device_id, fp): pk
        for device_id, fp, pk in Telemetry.objects.filter(
            fingerprint__in={fp for _, fp in rows}
        ).values_list("device_id", "fingerprint", "pk")
        if (device_id, fp) in rows
    }


def _build_events(
    parsed: Sequence[_Parsed],
    endpoints: dict[tuple[int, str], DeviceInstanceEndpoint],
    telemetry_ids: dict[tuple[int, str], int],
    now: datetime,
) -> tuple[list[AutomationEndpointEvent], list[TelemetryRejection]]:
    events: dict[str, AutomationEndpointEvent] = {}
    rejections: list[TelemetryRejection] = []
    for p in parsed:
        device = p.device
        for key, value in p.values.items():
            endpoint = endpoints.get((device.pk, key))
            if endpoint is None:
                continue  # not in this device's catalogue: kept in Telemetry, not an event
            if not value_has_type(endpoint.profile_endpoint.data_type, value):
                detail = f"{key}={value!r} is not {endpoint.profile_endpoint.data_type}"
                rejections.append(_rejection(p.message, Reason.INVALID_VALUE_TYPE, detail))
                continue
            dedupe = event_dedupe_key(
                device_id=device.pk,
                endpoint_id=endpoint.pk,
                event_ts=p.ts,
                value=value,
                fingerprint=p.fingerprint,
            )
            events[dedupe] = AutomationEndpointEvent(
                organization_id=device.farm.organization_id,
                farm_id=device.farm_id,
                device_id=device.pk,
                device_instance_endpoint_id=endpoint.pk,
                source_telemetry_id=telemetry_ids[(device.pk, p.fingerprint)],
                event_timestamp=p.ts,
                normalized_value=value,
                raw_payload_snapshot={"key": key, "value": value, "ts": p.ts.isoformat()},
                dedupe_key=dedupe,
                created_at=now,
            )
    return list(events.values()), rejections


def _touch_devices(parsed: Sequence[_Parsed], now: datetime) -> None:
    device_ids = sorted({p.device.pk for p in parsed})
    if device_ids:
        Device.objects.filter(pk__in=device_ids).update(last_seen_at=now)


def _update_last_values(
    events: Sequence[AutomationEndpointEvent],
    endpoints: dict[tuple[int, str], DeviceInstanceEndpoint],
) -> None:
    """Keep each endpoint's newest reported value (by message time), one UPDATE per batch."""
    by_id = {e.pk: e for e in endpoints.values()}
    changed: dict[int, DeviceInstanceEndpoint] = {}
    for event in events:
        endpoint = by_id[event.device_instance_endpoint_id]
        if endpoint.last_value_at is None or event.event_timestamp >= endpoint.last_value_at:
            endpoint.last_value = event.normalized_value
            endpoint.last_value_at = event.event_timestamp
            changed[endpoint.pk] = endpoint
    if changed:
        ordered = [changed[pk] for pk in sorted(changed)]
        DeviceInstanceEndpoint.objects.bulk_update(ordered, ["last_value", "last_value_at"])
