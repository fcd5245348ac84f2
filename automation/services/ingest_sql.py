"""The statements ingest runs on every batch beyond its INSERTs (``common.sql``) and the
devices' own (``devices.ingest_sql``), hand-written and run through ``common.hot_sql``: on
PostgreSQL each is a prepared statement, parsed and planned once per connection. The ORM
stays where a person waits (API, admin, reports).

On PostgreSQL the endpoints' last values and the read of the commands those readings may
prove are one statement (the UPDATE in a ``WITH``); SQLite runs no UPDATE inside a ``WITH``,
so there they are two."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime, timedelta
from typing import NamedTuple

from django.db import connection

from automation.models import DeviceCommand
from automation.states import COMMAND_AWAITING_DEVICE
from common.hot_models import db_time
from common.hot_sql import Params, hot_rows, in_list
from devices.ingest_sql import reported_values_statement, reported_values_write
from devices.models import Telemetry
from devices.reported import ReportedValue, reported_values_newest

UNSTAMPED_LOCK = 0x7E1E  # advisory lock class: unstamped telemetry of one device

_AWAITING = sorted(COMMAND_AWAITING_DEVICE)


class UnstampedCopy(NamedTuple):
    """An unstamped message as its earlier copies are looked for: its device, its
    fingerprint and its arrival (its only time)."""

    device_id: int
    fingerprint: bytes
    received_at: datetime


def _awaiting_statement(endpoint_ids: Sequence[int]) -> tuple[str, Params]:
    """The commands waiting for their device on ``endpoint_ids``."""
    ids_sql, ids = in_list(list(endpoint_ids))
    status_sql, statuses = in_list(_AWAITING)
    sql = (
        f"SELECT id FROM {DeviceCommand._meta.db_table} "
        f"WHERE target_device_endpoint_id IN {ids_sql} AND status IN {status_sql}"
    )
    return sql, [*ids, *statuses]


def endpoint_readings_store(readings: Iterable[ReportedValue]) -> list[int]:
    """Each endpoint's newest reading of ``readings`` as its last value (when newer than the
    one it holds: ``devices.ingest_sql.reported_values_statement``); returns the commands
    waiting for their device on those endpoints, which the readings may prove applied."""
    newest = reported_values_newest(readings)
    if not newest:
        return []
    awaiting_sql, awaiting_params = _awaiting_statement(sorted(r.endpoint_id for r in newest))
    if connection.vendor == "postgresql":
        update_sql, update_params = reported_values_statement(newest)
        sql = f"WITH reported AS ({update_sql}) {awaiting_sql}"
        rows = hot_rows(sql, [*update_params, *awaiting_params])
    else:
        reported_values_write(newest)
        rows = hot_rows(awaiting_sql, awaiting_params)
    return sorted(int(pk) for (pk,) in rows)


def telemetry_unstamped_lock(device_ids: Sequence[int]) -> None:
    """PostgreSQL: a lock per device, held to commit, on its unstamped telemetry, taken in
    id order so two workers cannot deadlock on it. SQLite writes one at a time anyway."""
    if connection.vendor != "postgresql" or not device_ids:
        return
    hot_rows(
        "SELECT pg_advisory_xact_lock(%s::int, d) FROM unnest(%s::int[]) AS d ORDER BY d",
        [UNSTAMPED_LOCK, sorted(set(device_ids))],
    )


def telemetry_unstamped_seen(
    copies: Sequence[UnstampedCopy], window: timedelta
) -> set[tuple[int, bytes]]:
    """The (device, fingerprint) of ``copies`` already stored with a time within ``window``
    of their arrival, on the unique key (device, time, fingerprint)."""
    if not copies:
        return set()
    match = "(device_id = %s AND fingerprint = %s AND message_ts >= %s AND message_ts <= %s)"
    params: list[object] = []
    for copy in copies:
        at = copy.received_at
        params += [copy.device_id, copy.fingerprint, db_time(at - window), db_time(at + window)]
    rows = hot_rows(
        f"SELECT device_id, fingerprint FROM {Telemetry._meta.db_table} "
        f"WHERE {' OR '.join([match] * len(copies))}",
        params,
    )
    return {(int(device_id), bytes(fp)) for device_id, fp in rows}
