"""The statements the devices app runs on every batch of readings, hand-written and run
through ``common.hot_sql`` (on PostgreSQL each is a prepared statement, parsed and planned
once per connection): the devices of a batch's serials with their endpoints, the touch of
the devices heard from, the compare-and-set of ``online`` (``devices.services.health``) and
the endpoints' last reported values (``devices.reported``). The ORM stays where a person
waits; the offline time's formula is written once, here, for both.

One read replaces the ORM's two: each device with its farm and each of its endpoints with
its profile endpoint."""

from __future__ import annotations

import functools
import json
from collections.abc import Collection, Sequence
from datetime import datetime
from typing import Any, NamedTuple

from django.db import connection

from common.hot_models import db_time, model_columns, model_from_row, model_width
from common.hot_sql import hot_rows, hot_run, in_list
from devices.models import (
    Device,
    DeviceInstanceEndpoint,
    DeviceProfile,
    DeviceProfileEndpoint,
    Farm,
)

OFFLINE_INTERVALS = 3  # a device silent this many expected intervals is offline by default

DEVICES = Device._meta.db_table
ENDPOINTS = DeviceInstanceEndpoint._meta.db_table
_DEVICE_ID = Device._meta.concrete_fields.index(Device._meta.pk)  # its place in a read's row


class DeviceEndpoints(NamedTuple):
    """A device (its farm attached) and its endpoints by key (profile endpoints attached)."""

    device: Device
    endpoints: dict[str, DeviceInstanceEndpoint]


@functools.cache
def _devices_statement(count: int) -> str:
    """The read of ``count`` serials (its text depends on the count only)."""
    serials_sql = in_list([""] * count)[0]
    return (
        f"SELECT {model_columns(Device, 'd')}, {model_columns(Farm, 'f')}, "
        f"{model_columns(DeviceInstanceEndpoint, 'e')}, "
        f"{model_columns(DeviceProfileEndpoint, 'p')} "
        f"FROM {DEVICES} d JOIN {Farm._meta.db_table} f ON f.id = d.farm_id "
        f"LEFT JOIN {ENDPOINTS} e ON e.device_id = d.id "
        f"LEFT JOIN {DeviceProfileEndpoint._meta.db_table} p ON p.id = e.profile_endpoint_id "
        f"WHERE d.serial_number IN {serials_sql} ORDER BY d.id, e.id"
    )


def devices_with_endpoints(serials: Collection[str]) -> dict[str, DeviceEndpoints]:
    """The known devices among ``serials`` with their endpoints, in one statement."""
    wanted = sorted(set(serials))
    if not wanted:
        return {}
    farm_at = model_width(Device)
    endpoint_at = farm_at + model_width(Farm)
    profile_at = endpoint_at + model_width(DeviceInstanceEndpoint)
    by_id: dict[int, DeviceEndpoints] = {}
    for row in hot_rows(_devices_statement(len(wanted)), wanted):
        entry = by_id.get(row[_DEVICE_ID])
        if entry is None:
            device = model_from_row(Device, row)
            assert device is not None  # the device's own columns: never NULL
            device.farm = model_from_row(Farm, row, farm_at)  # type: ignore[assignment]
            entry = by_id[device.pk] = DeviceEndpoints(device, {})
        endpoint = model_from_row(DeviceInstanceEndpoint, row, endpoint_at)
        if endpoint is not None:  # a device with no endpoint has one row, of NULLs here
            profile_endpoint = model_from_row(DeviceProfileEndpoint, row, profile_at)
            endpoint.profile_endpoint = profile_endpoint  # type: ignore[assignment]
            entry.endpoints[endpoint.profile_endpoint.key] = endpoint
    return {e.device.serial_number: e for e in by_id.values()}


def offline_due_sql(since: str, window: str) -> str:
    """The offline time of a ``devices_device`` row being updated: ``since`` (SQL) plus its
    window, ``window`` (SQL) when not NULL, else ``OFFLINE_INTERVALS`` of its profile's
    interval, read in the same statement so a concurrent edit cannot leave it stale."""
    interval = (
        f"(SELECT p.expected_interval_s FROM {DeviceProfile._meta.db_table} p "
        f"WHERE p.id = {DEVICES}.profile_id)"
    )
    seconds = f"COALESCE({window}, {interval} * {OFFLINE_INTERVALS})"
    if connection.vendor == "postgresql":
        return f"({since} + {seconds} * INTERVAL '1 second')"
    # Django's own function for datetime arithmetic on SQLite (a duration in microseconds).
    return f"django_format_dtdelta('+', {since}, {seconds} * 1000000)"


def devices_touch(device_ids: Sequence[int], now: datetime) -> list[int]:
    """Last seen ``now`` and the offline time that follows, for ``device_ids``; returns those
    of them not online. The row locks it takes hold to commit, so no one can move ``online``
    of these devices before the caller's compare-and-set."""
    ids_sql, params = in_list(sorted(set(device_ids)))
    at = db_time(now)
    due = offline_due_sql("%s", f"{DEVICES}.offline_after_s")
    rows = hot_rows(
        f"UPDATE {DEVICES} SET last_seen_at = %s, offline_due_at = {due} "
        f"WHERE id IN {ids_sql} RETURNING id, online",
        [at, at, *params],
    )
    return sorted(int(pk) for pk, online in rows if not online)


def devices_online_set(
    device_ids: Sequence[int], *, online: bool, due_by: datetime | None
) -> list[tuple[Any, ...]]:
    """The compare-and-set of ``online`` (``devices.services.health``): written only on rows
    that do not hold it yet (and, going offline by the sweep, ``due_by``, whose offline time
    has still come); going offline clears the offline time. Returns (id, serial number, farm
    id, last seen) of exactly the rows moved."""
    ids_sql, params = in_list(list(device_ids))
    sets = "online = %s" if online else "online = %s, offline_due_at = NULL"
    where = f"id IN {ids_sql} AND online = %s"
    args: list[Any] = [online, *params, not online]
    if due_by is not None:
        where += " AND offline_due_at <= %s"
        args.append(db_time(due_by))
    return hot_rows(
        f"UPDATE {DEVICES} SET {sets} WHERE {where} "
        "RETURNING id, serial_number, farm_id, last_seen_at",
        args,
    )


Reading = tuple[int, Any, datetime]  # endpoint id, value, device time


def reported_values_statement(newest: Collection[Reading]) -> tuple[str, list[Any]]:
    """The guarded UPDATE of endpoints' last values (one reading per endpoint): an endpoint
    takes the value only when it holds none or an older one, so a message that arrives late
    never overwrites a newer value. PostgreSQL takes the rows as three arrays, one statement
    text whatever their number; SQLite as a VALUES list."""
    rows_in = sorted(newest, key=lambda r: r[0])
    ids = [r[0] for r in rows_in]
    encoded = [json.dumps(r[1]) for r in rows_in]
    stamps = [r[2] for r in rows_in]
    guard = (
        f"{ENDPOINTS}.id = v.id AND "
        f"({ENDPOINTS}.last_value_at IS NULL OR {ENDPOINTS}.last_value_at <= v.ts)"
    )
    if connection.vendor == "postgresql":
        sql = (
            f"UPDATE {ENDPOINTS} SET last_value = v.val::jsonb, last_value_at = v.ts "
            "FROM unnest(%s::bigint[], %s::text[], %s::timestamptz[]) AS v(id, val, ts) "
            f"WHERE {guard}"
        )
        return sql, [ids, encoded, stamps]
    rows = ", ".join(["(%s, %s, %s)"] * len(ids))
    sql = (
        f"WITH v(id, val, ts) AS (VALUES {rows}) "
        f"UPDATE {ENDPOINTS} SET last_value = v.val, last_value_at = v.ts FROM v WHERE {guard}"
    )
    params = [x for row in zip(ids, encoded, map(db_time, stamps), strict=True) for x in row]
    return sql, params


def reported_values_write(newest: Collection[Reading]) -> int:
    """Run ``reported_values_statement``; how many endpoints took their value."""
    if not newest:
        return 0
    return hot_run(*reported_values_statement(newest))
