"""Telemetry ingestion: validate (device time within bounds of the server clock included),
persist, normalise into endpoint events; whatever is refused, a whole message or some of its
values, becomes a rejection row. Set-based per batch (one INSERT … ON CONFLICT DO NOTHING per
table), never evaluating or dispatching inline."""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from automation.keys import telemetry_fingerprint
from automation.models import AutomationEndpointEvent
from automation.services.ingest_sql import (
    UnstampedCopy,
    endpoint_readings_store,
    telemetry_unstamped_lock,
    telemetry_unstamped_seen,
)
from automation.services.rows import as_row
from automation.services.rule_cache import endpoints_read
from automation.services.spine import Committed, hand_on_commit
from common.json_types import JsonObject, JsonValue
from common.sql import insert_ignore_returning
from common.validators import JSON_MAX_DEPTH, json_bounds_violation
from devices.directory import DeviceDirectory
from devices.ingest_sql import DeviceEndpoints, devices_with_endpoints
from devices.models import (
    Device,
    DeviceInstanceEndpoint,
    DeviceMessageRejection,
    DeviceStatus,
    Telemetry,
)
from devices.models import DeviceMessageRejectionReason as Reason
from devices.mqtt.messages import InboundTelemetry
from devices.reported import ReportedValue
from devices.services.health import devices_heard_from
from devices.services.rejections import device_message_rejections_record, is_utf8, printable
from devices.timestamps import device_time_detail, device_time_violation
from devices.values import value_has_type

logger = logging.getLogger(__name__)

MAX_TELEMETRY_BYTES = 64 * 1024


class Rejected(Exception):
    def __init__(self, reason: Reason, detail: str = "") -> None:
        super().__init__(detail)
        self.reason = reason
        self.detail = detail


@dataclass(frozen=True)
class _Parsed:
    index: int  # position in the batch
    message: InboundTelemetry
    device: Device
    ts: datetime
    values: JsonObject
    fingerprint: bytes
    stamped: bool  # False: no ``ts``, timed by its arrival


@dataclass(frozen=True)
class _EventRow:
    """An ``AutomationEndpointEvent`` as a batch inserts it (foreign keys by id)."""

    device_instance_endpoint: int
    source_telemetry: int
    event_timestamp: datetime
    normalized_value: JsonValue
    created_at: datetime


@dataclass(frozen=True)
class MessageRejection:
    """A rejection as a caller reports it back (the HTTP API lists them); the stored row is the
    DeviceMessageRejection with the same reason and detail."""

    index: int  # the message's position in the batch
    serial: str
    reason: str  # a DeviceMessageRejectionReason value
    detail: str
    message_dropped: bool  # False: only the values named in ``detail`` were refused


@dataclass(frozen=True)
class _Refused:
    index: int
    message_dropped: bool
    row: DeviceMessageRejection

    def reported(self) -> MessageRejection:
        row = self.row
        return MessageRejection(
            self.index, row.serial_number, row.reason_code, row.detail, self.message_dropped
        )


@dataclass(frozen=True)
class IngestResult:
    telemetry: int
    events: int  # the endpoint values accepted, stored as an event or only in their telemetry
    rejections: int
    pending_event_ids: list[int]  # the new events: each a value a rule or a reminder reads
    rejected: list[MessageRejection] = field(default_factory=list)  # in batch order
    # Commands waiting for their device whose target endpoint has new readings: they may now
    # be proven applied, so reconciliation follows ingest directly, evaluated or not.
    awaiting_command_ids: list[int] = field(default_factory=list)

    @property
    def committed(self) -> Committed:
        """What the next stages act on: the new events and the commands they may prove."""
        return Committed(events=self.pending_event_ids, evidence=self.awaiting_command_ids)


def _parse_body(payload: str, received_at: datetime) -> tuple[datetime, bool, JsonObject]:
    """The device time (``received_at`` when the message has no ``ts``), whether the message
    carried one, and its values."""
    if len(payload.encode("utf-8", "surrogatepass")) > MAX_TELEMETRY_BYTES:
        raise Rejected(Reason.PAYLOAD_TOO_LARGE, f"more than {MAX_TELEMETRY_BYTES} bytes")
    try:
        body = json.loads(payload)
    except RecursionError:
        raise Rejected(
            Reason.JSON_TOO_DEEP, f"nested deeper than {JSON_MAX_DEPTH} levels"
        ) from None
    except ValueError as exc:
        raise Rejected(Reason.INVALID_JSON, str(exc)[:200]) from None
    violation = json_bounds_violation(body, max_bytes=None)  # the bytes were bounded above
    if violation is not None:
        raise Rejected(Reason.JSON_TOO_DEEP, violation.message)
    if not isinstance(body, dict):
        raise Rejected(Reason.NOT_AN_OBJECT, type(body).__name__)
    values = body.get("values")
    if not isinstance(values, dict):
        raise Rejected(Reason.MISSING_VALUES, "payload has no 'values' object")
    raw_ts = body.get("ts")
    if raw_ts is None:
        return received_at, False, values
    try:
        ts = parse_datetime(raw_ts) if isinstance(raw_ts, str) else None
    except ValueError:
        ts = None
    if ts is None or ts.tzinfo is None:
        raise Rejected(Reason.INVALID_TIMESTAMP, f"ts={raw_ts!r} is not an ISO-8601 UTC time")
    try:  # stored in UTC: an offset can push year 1 or 9999 out of range
        ts = ts.astimezone(UTC)
    except OverflowError:
        raise Rejected(Reason.INVALID_TIMESTAMP, f"ts={raw_ts!r} is out of range in UTC") from None
    return ts, True, values


def _storable(data_type: str, value: JsonValue) -> bool:
    """``value_has_type`` plus what the event's jsonb column needs: an integer too large for
    a float fails the type instead of raising, a lone surrogate is no text."""
    try:
        typed = value_has_type(data_type, value)
    except OverflowError:
        return False
    return typed and (not isinstance(value, str) or is_utf8(value))


def _rejection(
    message: InboundTelemetry, reason: Reason, detail: str = ""
) -> DeviceMessageRejection:
    return DeviceMessageRejection(
        serial_number=printable(message.serial[:200]),
        raw_payload=printable(message.payload[:MAX_TELEMETRY_BYTES]),
        reason_code=reason,
        detail=printable(detail[:500]),
        received_at=message.received_at,
    )


def _validate(
    messages: Sequence[InboundTelemetry], devices: dict[str, Device], now: datetime
) -> tuple[list[_Parsed], list[_Refused]]:
    parsed: list[_Parsed] = []
    refused: list[_Refused] = []
    for index, message in enumerate(messages):
        device = devices.get(message.serial)
        try:
            if device is None:
                raise Rejected(Reason.UNKNOWN_DEVICE, "no device with this serial number")
            if device.status == DeviceStatus.RETIRED:
                raise Rejected(Reason.DEVICE_RETIRED, "device is retired")
            if message.bad_encoding or not is_utf8(message.payload):
                raise Rejected(Reason.INVALID_ENCODING, "payload is not valid UTF-8")
            ts, stamped, values = _parse_body(message.payload, message.received_at)
            clock = device_time_violation(ts, now)
            if clock is not None:
                raise Rejected(clock, device_time_detail("ts", ts, now))
        except Rejected as exc:
            refused.append(_Refused(index, True, _rejection(message, exc.reason, exc.detail)))
            continue
        fingerprint = telemetry_fingerprint(message.payload)
        parsed.append(_Parsed(index, message, device, ts, values, fingerprint, stamped))
    return parsed, refused


def telemetry_ingest(
    *,
    messages: Sequence[InboundTelemetry],
    directory: DeviceDirectory | None = None,
) -> IngestResult:
    """Persist a batch of telemetry; the caller hands ``IngestResult.committed`` on (the
    bridge with its nudger, the other ways in after commit: ``telemetry_accept``).
    ``directory`` (the bridge's) answers the device and endpoint lookups from its cache;
    without it they are read here, in one statement.

    Idempotent: a redelivered message inserts no telemetry, so no events are even built for
    it. A crash between commit and hand-off only delays work: the pending sweep finds it.
    """
    serials = {m.serial for m in messages if "\x00" not in m.serial}
    found: dict[str, DeviceEndpoints] = {}  # read here when there is no directory
    if directory is None:
        found = devices_with_endpoints(serials)
        devices = {serial: f.device for serial, f in found.items()}
    else:
        devices = directory.devices(serials)
    now = timezone.now()
    parsed, refused = _validate(messages, devices, now)
    endpoints: dict[tuple[int, str], DeviceInstanceEndpoint]
    if directory is None:
        endpoints = {
            (p.device.pk, key): endpoint
            for p in parsed
            for key, endpoint in found[p.device.serial_number].endpoints.items()
        }
    else:
        endpoints = directory.endpoints({p.device for p in parsed})
    with transaction.atomic():
        fresh = _persist_telemetry(parsed)
        values, value_refusals = _accepted_values(fresh, endpoints, now)
        refused = sorted([*refused, *value_refusals], key=lambda r: r.index)
        read = endpoints_read()
        events = [as_row(v) for v in values if v.device_instance_endpoint in read]
        event_ids = [pk for (pk,) in insert_ignore_returning(AutomationEndpointEvent, events)]
        device_message_rejections_record(rejections=[r.row for r in refused])
        _touch_devices(parsed, now)
        awaiting = _store_last_values(values)
    return IngestResult(
        telemetry=len(fresh),
        events=len(values),
        rejections=len(refused),
        pending_event_ids=event_ids,
        rejected=[r.reported() for r in refused],
        awaiting_command_ids=awaiting,
    )


def _persist_telemetry(parsed: Sequence[_Parsed]) -> list[tuple[_Parsed, int]]:
    """Insert-or-ignore the batch's telemetry; returns only the messages seen for the first
    time, with their new row ids."""
    unique = {(p.device.pk, p.fingerprint): p for p in parsed}
    for seen in _unstamped_seen([p for p in unique.values() if not p.stamped]):
        del unique[seen]
    rows = [
        {
            "device": p.device.pk,
            "raw_payload": p.message.payload,
            "fingerprint": p.fingerprint,
            "message_ts": p.ts,
            "received_at": p.message.received_at,
        }
        for p in unique.values()
    ]
    inserted = insert_ignore_returning(Telemetry, rows, ("id", "device", "fingerprint"))
    return [(unique[(device_id, bytes(fp))], pk) for pk, device_id, fp in inserted]


def _unstamped_seen(unstamped: Sequence[_Parsed]) -> set[tuple[int, bytes]]:
    """The (device, fingerprint) of unstamped messages already stored within
    ``TELEMETRY_UNSTAMPED_DEDUPE_S`` of their arrival. Such a message's time is its arrival,
    which a copy the broker redelivers to a restarted bridge does not share, so the unique key
    alone would take it twice. On PostgreSQL a lock per device, held to commit, keeps two
    workers from both missing the other's copy."""
    if not unstamped:
        return set()
    telemetry_unstamped_lock([p.device.pk for p in unstamped])
    window = timedelta(seconds=settings.TELEMETRY_UNSTAMPED_DEDUPE_S)
    copies = [UnstampedCopy(p.device.pk, p.fingerprint, p.message.received_at) for p in unstamped]
    return telemetry_unstamped_seen(copies, window)


def _accepted_values(
    fresh: Sequence[tuple[_Parsed, int]],
    endpoints: dict[tuple[int, str], DeviceInstanceEndpoint],
    now: datetime,
) -> tuple[list[_EventRow], list[_Refused]]:
    """One event per value of a known endpoint; a value of the wrong type is one rejection,
    the keys with no endpoint on the device one more per message: the rest goes through.

    Only the events of endpoints something reads (``endpoints_read``) are stored: a value
    nobody evaluates keeps its telemetry row and its endpoint's reported value, which is
    what the series, the chart and a command's evidence read (``devices.readings``). An
    event row would add about 230 B per value for nothing (docs/benchmarks.md)."""
    events: dict[tuple[int, int], _EventRow] = {}  # by (endpoint, telemetry): the unique key
    refused: list[_Refused] = []
    for p, telemetry_id in fresh:
        unknown: list[str] = []
        for key, value in p.values.items():
            endpoint = endpoints.get((p.device.pk, key))
            if endpoint is None:
                unknown.append(key)
                continue
            if not _storable(endpoint.profile_endpoint.data_type, value):
                detail = f"{key}={value!r} is not {endpoint.profile_endpoint.data_type}"
                row = _rejection(p.message, Reason.INVALID_VALUE_TYPE, detail)
                refused.append(_Refused(p.index, False, row))
                continue
            event = _event_row(p, telemetry_id, endpoint, value, now)
            events[endpoint.pk, telemetry_id] = event
        if unknown:
            detail = f"no endpoint on this device for {len(unknown)} key(s): {json.dumps(unknown)}"
            row = _rejection(p.message, Reason.UNKNOWN_ENDPOINT, detail)
            refused.append(_Refused(p.index, False, row))
    return list(events.values()), refused


def _event_row(
    p: _Parsed,
    telemetry_id: int,
    endpoint: DeviceInstanceEndpoint,
    value: JsonValue,
    now: datetime,
) -> _EventRow:
    """The event keeps the value and the telemetry row it came from; the message itself
    (key, value, device time) stays on that row only."""
    return _EventRow(
        device_instance_endpoint=endpoint.pk,
        source_telemetry=telemetry_id,
        event_timestamp=p.ts,
        normalized_value=value,
        created_at=now,
    )


def _touch_devices(parsed: Sequence[_Parsed], now: datetime) -> None:
    """Last seen now, and back online if they were not (``devices.services.health``): one
    statement per batch, and a second only when a device was not online."""
    devices_heard_from(device_ids=[p.device.pk for p in parsed], now=now)


def _store_last_values(events: Sequence[_EventRow]) -> list[int]:
    """The endpoints' last values; returns the commands these readings may prove applied."""
    return endpoint_readings_store(
        ReportedValue(e.device_instance_endpoint, e.normalized_value, e.event_timestamp)
        for e in events
    )


def telemetry_accept(*, messages: Sequence[InboundTelemetry]) -> IngestResult:
    """Ingest a batch that did not come through the bridge (HTTP gateways, batches an older
    bridge queued), handing its next stages on after commit, as the bridge does."""
    result = telemetry_ingest(messages=messages)
    hand_on_commit(result.committed)
    return result
