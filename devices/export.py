"""Reads: a farm's raw readings over a window as CSV lines, streamed in constant memory.

The stored telemetry is read in pages of ``EXPORT_PAGE_ROWS`` messages by a keyset on (device
time, id): each page is one short query that starts after the last row of the one before, so
no server-side cursor is held open between pages (the database may sit behind PgBouncer in
transaction mode) and at most one page is in memory. A message that lands in the window while
the export runs appears if its key sorts after the page being read. Each message yields one
line per value of an exported endpoint that has its endpoint's type (``devices.readings``).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any
from zoneinfo import ZoneInfo

from django.db.models import Q

from common.renderers import csv_lines
from devices.models import DeviceInstanceEndpoint, Farm, Telemetry
from devices.readings import TelemetryRow, typed_readings

EXPORT_PAGE_ROWS = 2000  # telemetry messages per query
EXPORT_HEADER = ("time_utc", "time_local", "serial", "endpoint", "value")


@dataclass(frozen=True)
class ReadingsExport:
    """What one export reads: the farm, its devices' serials, the endpoints' types by
    (device id, key), and the window [``start``, ``end``) of device time."""

    farm: Farm
    serials: dict[int, str]
    types: dict[tuple[int, str], str]
    start: datetime
    end: datetime


def readings_export_plan(
    *, farm: Farm, endpoint_id: int | None, start: datetime, end: datetime
) -> ReadingsExport | None:
    """The export of ``farm``'s endpoints (or only ``endpoint_id``); None when that endpoint
    is not the farm's."""
    endpoints = DeviceInstanceEndpoint.objects.filter(device__farm=farm)
    if endpoint_id is not None:
        endpoints = endpoints.filter(pk=endpoint_id)
    found = list(
        endpoints.values_list(
            "device_id",
            "device__serial_number",
            "profile_endpoint__key",
            "profile_endpoint__data_type",
        )
    )
    if endpoint_id is not None and not found:
        return None
    return ReadingsExport(
        farm=farm,
        serials={device: serial for device, serial, _, _ in found},
        types={(device, key): data_type for device, _, key, data_type in found},
        start=start,
        end=end,
    )


def telemetry_pages(
    *, device_ids: list[int], start: datetime, end: datetime, page_rows: int = EXPORT_PAGE_ROWS
) -> Iterator[list[TelemetryRow]]:
    """The devices' messages with a device time in [``start``, ``end``), oldest first (then by
    id), a page per query."""
    window = Telemetry.objects.filter(
        device_id__in=device_ids, message_ts__gte=start, message_ts__lt=end
    ).order_by("message_ts", "pk")
    fields = ("pk", "device_id", "message_ts", "received_at", "raw_payload")
    after: tuple[datetime, int] | None = None
    while True:
        rows = window
        if after is not None:
            at, pk = after
            rows = rows.filter(Q(message_ts__gt=at) | Q(message_ts=at, pk__gt=pk))
        page: list[TelemetryRow] = list(rows.values_list(*fields)[:page_rows])
        if page:
            yield page
        if len(page) < page_rows:
            return
        last = page[-1]
        after = (last[2], last[0])


def _iso_utc(at: datetime) -> str:
    return at.astimezone(UTC).isoformat().replace("+00:00", "Z")


def _value(value: Any) -> str:
    """As in the device's message: ``true``/``false``, a number, or the enum's text."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def readings_csv(export: ReadingsExport) -> Iterator[bytes]:
    """The header, then a chunk of lines per page: one line per exported value."""
    yield csv_lines([EXPORT_HEADER]).encode()
    if not export.types:
        return
    zone = ZoneInfo(export.farm.time_zone)
    pages = telemetry_pages(device_ids=sorted(export.serials), start=export.start, end=export.end)
    for page in pages:
        lines = (
            (
                _iso_utc(r.at),
                r.at.astimezone(zone).isoformat(),
                export.serials[r.device_id],
                r.key,
                _value(r.value),
            )
            for r in typed_readings(page, export.types)
        )
        yield csv_lines(lines).encode()
