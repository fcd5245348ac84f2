"""The statements dispatch runs on every batch (its read, the claim's lock, the receipts a
fast device left, and the transitions' follow-ups), hand-written and run through
``common.hot_sql``: on PostgreSQL each is a prepared statement, parsed and planned once per
connection. The claim and the status moves are ``common.sql``'s batch compare-and-set and
insert, which run the same way; the ORM stays where a person waits (API, admin, reports).

One read replaces the ORM's three: each command with its endpoint, the endpoint's device
and profile endpoint, its rule and the rule's farm (what every safety gate needs), and the
command holding the endpoint's inflight slot, if any (what the claim needs)."""

from __future__ import annotations

import functools
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from automation.models import AutomationRule, DeviceCommand, DeviceCommandReceipt
from automation.states import CommandStatus
from common.hot_models import model_columns, model_from_row, model_width
from common.hot_sql import hot_rows, in_list
from devices.models import Device, DeviceInstanceEndpoint, DeviceProfileEndpoint, Farm

COMMANDS = DeviceCommand._meta.db_table

# The models of the read's row, in the order their columns come.
_READ_MODELS: tuple[type, ...] = (
    DeviceCommand,
    DeviceInstanceEndpoint,
    Device,
    DeviceProfileEndpoint,
    AutomationRule,
    Farm,
)


@functools.cache
def _read_statement(count: int) -> str:
    """The read of ``count`` commands (its text depends on the count only)."""
    ids_sql = in_list([0] * count)[0]
    return (
        f"SELECT {model_columns(DeviceCommand, 'c')}, "
        f"{model_columns(DeviceInstanceEndpoint, 'e')}, "
        f"{model_columns(Device, 'd')}, {model_columns(DeviceProfileEndpoint, 'p')}, "
        f"{model_columns(AutomationRule, 'r')}, {model_columns(Farm, 'f')}, "
        f"(SELECT h.id FROM {COMMANDS} h "
        f"WHERE h.inflight_endpoint_id = c.target_device_endpoint_id) "
        f"FROM {COMMANDS} c "
        f"JOIN {DeviceInstanceEndpoint._meta.db_table} e ON e.id = c.target_device_endpoint_id "
        f"JOIN {Device._meta.db_table} d ON d.id = e.device_id "
        f"JOIN {DeviceProfileEndpoint._meta.db_table} p ON p.id = e.profile_endpoint_id "
        f"LEFT JOIN {AutomationRule._meta.db_table} r ON r.id = c.rule_id "
        f"LEFT JOIN {Farm._meta.db_table} f ON f.id = r.farm_id "
        f"WHERE c.id IN {ids_sql} ORDER BY c.id"
    )


@dataclass
class DispatchRow:
    """A command as dispatch reads it: its target endpoint (device and profile endpoint
    attached), its rule (farm attached; None for a manual command) and the command holding
    the endpoint's inflight slot (None: free)."""

    command: DeviceCommand
    target: DeviceInstanceEndpoint
    rule: AutomationRule | None
    holder_id: int | None


def commands_read(ids: Sequence[int]) -> list[DispatchRow]:
    """The commands of ``ids`` that exist, in id order, with what their gates and claim need,
    in one statement."""
    wanted = sorted(set(ids))
    out: list[DispatchRow] = []
    for row in hot_rows(_read_statement(len(wanted)), wanted):
        start = 0
        loaded: list[object] = []
        for model in _READ_MODELS:
            loaded.append(model_from_row(model, row, start))
            start += model_width(model)
        command, target, device, profile_endpoint, rule, farm = loaded
        assert isinstance(command, DeviceCommand) and isinstance(target, DeviceInstanceEndpoint)
        target.device = device  # type: ignore[assignment]
        target.profile_endpoint = profile_endpoint  # type: ignore[assignment]
        if isinstance(rule, AutomationRule):
            rule.farm = farm  # type: ignore[assignment]
        else:
            rule = None
        out.append(DispatchRow(command, target, rule, row[start]))
    return out


def receipts_answered(command_ids: Sequence[int]) -> list[int]:
    """The commands of ``command_ids`` a device has already answered (a receipt names them):
    a fast device's reply may commit before its command is marked dispatched."""
    ids_sql, params = in_list(list(command_ids))
    rows = hot_rows(
        f"SELECT DISTINCT intent_id FROM {DeviceCommandReceipt._meta.db_table} "
        f"WHERE intent_id IN {ids_sql}",
        params,
    )
    return sorted(int(r[0]) for r in rows)


def endpoints_next_waiting(endpoint_ids: Sequence[int]) -> dict[int, int]:
    """endpoint id -> the oldest command pending dispatch on it, for freed endpoints."""
    ids_sql, params = in_list(sorted(set(endpoint_ids)))
    rows = hot_rows(
        f"SELECT target_device_endpoint_id, id FROM {COMMANDS} "
        f"WHERE target_device_endpoint_id IN {ids_sql} AND status = %s "
        "ORDER BY target_device_endpoint_id, created_at, id",
        [*params, str(CommandStatus.PENDING_DISPATCH)],
    )
    first: dict[int, int] = {}
    for endpoint_id, pk in rows:
        first.setdefault(int(endpoint_id), int(pk))
    return first


def device_farms(device_ids: Iterable[int]) -> dict[int, int]:
    """device id -> its farm's id."""
    ids_sql, params = in_list(sorted(set(device_ids)))
    table = Device._meta.db_table
    rows = hot_rows(f"SELECT id, farm_id FROM {table} WHERE id IN {ids_sql}", params)
    return {int(pk): int(farm_id) for pk, farm_id in rows}
