"""The read device replies run on every batch, hand-written and run through
``common.hot_sql`` (on PostgreSQL a prepared statement, parsed and planned once per
connection); the receipts' INSERT is ``common.sql``'s and the endpoints' last values are
``devices.ingest_sql``'s. The ORM stays where a person waits (API, admin, reports).

One read replaces the ORM's two: the commands the replies name and, when the batch carries a
state report, each command's device's endpoints (profile endpoints attached), which a state
report's values are matched against."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Literal, NamedTuple

from automation.models import DeviceCommand
from common.hot_models import model_columns, model_from_row, model_width
from common.hot_sql import hot_rows, in_list
from devices.models import DeviceInstanceEndpoint, DeviceProfileEndpoint

_COMMAND_ID = DeviceCommand._meta.concrete_fields.index(DeviceCommand._meta.pk)

Key = Literal["id", "device_command_id"]


class CommandRead(NamedTuple):
    """A command and its device's endpoints (empty when they were not asked for)."""

    command: DeviceCommand
    endpoints: list[DeviceInstanceEndpoint]


@functools.cache
def _read_statement(key: Key, count: int, endpoints: bool) -> str:
    """The read of ``count`` commands by ``key`` (its text depends on these only)."""
    keys_sql = in_list([0] * count)[0]
    columns = model_columns(DeviceCommand, "c")
    where = f"WHERE c.{key} IN {keys_sql}"
    if not endpoints:
        return f"SELECT {columns} FROM {DeviceCommand._meta.db_table} c {where}"
    return (
        f"SELECT {columns}, {model_columns(DeviceInstanceEndpoint, 'e')}, "
        f"{model_columns(DeviceProfileEndpoint, 'p')} "
        f"FROM {DeviceCommand._meta.db_table} c "
        f"LEFT JOIN {DeviceInstanceEndpoint._meta.db_table} e ON e.device_id = c.target_device_id "
        f"LEFT JOIN {DeviceProfileEndpoint._meta.db_table} p ON p.id = e.profile_endpoint_id "
        f"{where} ORDER BY c.id, e.id"
    )


def replied_commands_read(
    key: Key, values: Sequence[int] | Sequence[str], *, endpoints: bool
) -> list[CommandRead]:
    """The commands whose ``key`` (their id, or the commandId a device echoes) is among
    ``values``, in id order, with their device's endpoints when ``endpoints``; one
    statement."""
    wanted = list(dict.fromkeys(values))
    if not wanted:
        return []
    endpoint_at = model_width(DeviceCommand)
    profile_at = endpoint_at + model_width(DeviceInstanceEndpoint)
    by_id: dict[int, CommandRead] = {}
    for row in hot_rows(_read_statement(key, len(wanted), endpoints), wanted):
        read = by_id.get(row[_COMMAND_ID])
        if read is None:
            command = model_from_row(DeviceCommand, row)
            assert command is not None  # the command's own columns: never NULL
            read = by_id[command.pk] = CommandRead(command, [])
        if not endpoints:
            continue
        endpoint = model_from_row(DeviceInstanceEndpoint, row, endpoint_at)
        if endpoint is not None:  # a device with no endpoint has one row, of NULLs here
            profile_endpoint = model_from_row(DeviceProfileEndpoint, row, profile_at)
            endpoint.profile_endpoint = profile_endpoint  # type: ignore[assignment]
            read.endpoints.append(endpoint)
    return list(by_id.values())
