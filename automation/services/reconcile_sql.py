"""The statements reconcile runs on every batch (its locked read of the commands with their
receipts, the telemetry that may prove them, the cool-downs an applied command lifts),
hand-written and run through ``common.hot_sql``: on PostgreSQL each is a prepared
statement, parsed and planned once per connection. The status moves are
``automation.services.transitions``, which run the same way; the ORM stays where a person
waits (API, admin, reports).

After commit, the stage times of the commands that applied are read for the latency
histogram (``automation.services.latency``) in one statement too.

One read replaces the ORM's two: each command, locked, with its target endpoint and the
endpoint's profile endpoint (what the evidence names), and its receipts in the order they
were received. The receipts are those the read's snapshot holds: one that commits while the
read waits for a lock queues a reconcile of its own after its commit, which reads it."""

from __future__ import annotations

import functools
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import NamedTuple

from django.db import connection, models

from automation.models import (
    DeviceCommand,
    DeviceCommandReceipt,
)
from common.hot_models import column_time, db_time, model_columns, model_from_row, model_width
from common.hot_sql import hot_rows, in_list, json_value
from common.json_types import JsonObject
from devices.models import DeviceInstanceEndpoint, DeviceProfileEndpoint, Telemetry
from devices.readings import Reading, typed_readings


class Receipt(NamedTuple):
    """A stored receipt as the evidence reads it."""

    kind: str  # its ``ReceiptType``
    payload: JsonObject
    attempt: int
    received_at: datetime


@dataclass
class ReconcileRow:
    """A command as reconcile reads it, under its row lock: its target endpoint (profile
    endpoint attached) and its receipts, oldest first, but those that came on another
    device's topic (a mismatch is no evidence)."""

    command: DeviceCommand
    receipts: list[Receipt] = field(default_factory=list)


def _time(model: type[models.Model], name: str, value: object) -> datetime:
    """A timestamp column that is never NULL, as the ORM reads it."""
    at = column_time(model, name, value)
    assert at is not None
    return at


@functools.cache
def _read_statement(count: int, lock: bool) -> str:
    """The locked read of ``count`` commands (its text depends on the count only). Locks are
    taken in id order, so two batches sharing commands cannot deadlock; SQLite has none."""
    ids_sql = in_list([0] * count)[0]
    receipts = DeviceCommandReceipt._meta.db_table
    return (
        f"SELECT {model_columns(DeviceCommand, 'c')}, "
        f"{model_columns(DeviceInstanceEndpoint, 'e')}, "
        f"{model_columns(DeviceProfileEndpoint, 'p')}, "
        "r.id, r.receipt_type, r.payload, r.attempt, r.received_at "
        f"FROM {DeviceCommand._meta.db_table} c "
        f"JOIN {DeviceInstanceEndpoint._meta.db_table} e ON e.id = c.target_device_endpoint_id "
        f"JOIN {DeviceProfileEndpoint._meta.db_table} p ON p.id = e.profile_endpoint_id "
        f"LEFT JOIN {receipts} r ON r.intent_id = c.id AND NOT r.mismatch "
        f"WHERE c.id IN {ids_sql} ORDER BY c.id, r.received_at, r.id"
        + (" FOR UPDATE OF c" if lock else "")
    )


def commands_lock_read(ids: Sequence[int]) -> list[ReconcileRow]:
    """The commands of ``ids`` that exist, locked, in id order, with their receipts, in one
    statement."""
    wanted = sorted(set(ids))
    if not wanted:
        return []
    lock = bool(connection.features.has_select_for_update_of)
    start = sum(
        model_width(m) for m in (DeviceCommand, DeviceInstanceEndpoint, DeviceProfileEndpoint)
    )
    out: list[ReconcileRow] = []
    for row in hot_rows(_read_statement(len(wanted), lock), wanted):
        if not out or out[-1].command.pk != row[0]:
            out.append(ReconcileRow(_command(row)))
        receipt_id, kind, payload, attempt, at = row[start:]
        if receipt_id is not None:
            received_at = _time(DeviceCommandReceipt, "received_at", at)
            out[-1].receipts.append(Receipt(kind, json_value(payload), attempt, received_at))
    return out


def _command(row: Sequence[object]) -> DeviceCommand:
    """The command of a read's row, its target endpoint and profile endpoint attached."""
    command = model_from_row(DeviceCommand, row)
    start = model_width(DeviceCommand)
    target = model_from_row(DeviceInstanceEndpoint, row, start)
    profile_endpoint = model_from_row(
        DeviceProfileEndpoint, row, start + model_width(DeviceInstanceEndpoint)
    )
    assert command is not None and target is not None and profile_endpoint is not None
    target.profile_endpoint = profile_endpoint
    command.target_device_endpoint = target
    return command


def readings_received(
    *,
    device_ids: Sequence[int],
    types: dict[tuple[int, str], str],
    start: datetime,
    end: datetime,
    received_since: datetime,
) -> Iterator[Reading]:
    """The readings of the ``types`` endpoints ((device id, key) → data type) that the
    devices sent with a device time in [``start``, ``end``] and that arrived since
    ``received_since``, oldest first, in one statement: ``devices.readings.device_readings``
    for the hot path. The device time bounds keep the read on the (device, message_ts) key."""
    ids_sql, params = in_list(sorted(set(device_ids)))
    rows = hot_rows(
        "SELECT id, device_id, message_ts, received_at, raw_payload "
        f"FROM {Telemetry._meta.db_table} "
        f"WHERE device_id IN {ids_sql} AND message_ts >= %s AND message_ts <= %s "
        "AND received_at >= %s ORDER BY message_ts, id",
        [*params, db_time(start), db_time(end), db_time(received_since)],
    )
    yield from typed_readings(
        (
            (
                pk,
                device_id,
                _time(Telemetry, "message_ts", at),
                _time(Telemetry, "received_at", received_at),
                raw,
            )
            for pk, device_id, at, received_at, raw in rows
        ),
        types,
    )
