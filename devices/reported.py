"""What each endpoint last reported, newest by device time: telemetry and state reports feed
the same two columns (``last_value``, ``last_value_at``), so evaluation compares a decision
with what the device said last, whichever message said it."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any, NamedTuple

from django.db import connection

from devices.models import DeviceInstanceEndpoint


class ReportedValue(NamedTuple):
    endpoint_id: int
    value: Any
    device_time: datetime


def report_value(
    reported: Mapping[str, Any], *, param_key: str, endpoint_key: str
) -> tuple[bool, Any]:
    """An endpoint's value in a state report. Firmware echoes the command's parameter name
    (the endpoint's ``rpc_param_key``); a report keyed by the endpoint's own key (the name it
    uses in telemetry) counts too. This is the one mapping between the two names."""
    for key in (param_key, endpoint_key):
        if key and key in reported:
            return True, reported[key]
    return False, None


def endpoint_reported_values_update(*, readings: Iterable[ReportedValue]) -> None:
    """Keep each endpoint's newest reported value (by device time): one guarded UPDATE per
    batch, so an older message arriving late never overwrites a newer value."""
    newest: dict[int, ReportedValue] = {}
    for reading in readings:
        seen = newest.get(reading.endpoint_id)
        if seen is None or reading.device_time >= seen.device_time:
            newest[reading.endpoint_id] = reading
    if not newest:
        return
    ids = sorted(newest)
    values = [json.dumps(newest[pk].value) for pk in ids]
    stamps = [newest[pk].device_time for pk in ids]
    table = DeviceInstanceEndpoint._meta.db_table
    guard = (
        f"{table}.id = v.id AND ({table}.last_value_at IS NULL OR {table}.last_value_at <= v.ts)"
    )
    if connection.vendor == "postgresql":
        sql = (
            f"UPDATE {table} SET last_value = v.val::jsonb, last_value_at = v.ts "
            "FROM unnest(%s::bigint[], %s::text[], %s::timestamptz[]) AS v(id, val, ts) "
            f"WHERE {guard}"
        )
        params: list[Any] = [ids, values, stamps]
    else:
        adapt = connection.ops.adapt_datetimefield_value
        sql = (
            f"WITH v(id, val, ts) AS (VALUES {','.join(['(%s, %s, %s)'] * len(ids))}) "
            f"UPDATE {table} SET last_value = v.val, last_value_at = v.ts FROM v WHERE {guard}"
        )
        params = [x for row in zip(ids, values, map(adapt, stamps), strict=True) for x in row]
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
