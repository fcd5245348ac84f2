"""The statements evaluation runs on every batch, hand-written and run through
``common.hot_sql``: on PostgreSQL each is a prepared statement, parsed and planned once per
connection. The inserts are ``common.sql``'s set-based ones, which run the same way, and the
targets' lock is ``automation.services.targets``' (the dispatcher's claim takes it too); the
ORM stays where a person waits (API, admin, reports).

A batch reads its events, then under the targets' lock their live commands, then what each
endpoint last reported with its manual hold and its cool-downs in one statement (where the
ORM took three), inserts its decisions, and ends its events in one guarded UPDATE (where the
ORM took one per outcome). The scheduler's decisions (schedules, watchdogs) and the other
writers that supersede unsent commands (manual, run-time limits, rollouts) read through the
same functions."""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import NamedTuple, cast

from django.db import models

from automation.models import (
    AutomationEndpointEvent,
    AutomationRule,
    AutomationRuleExecution,
    CommandCooldown,
    DeviceCommand,
    EndpointManualHold,
)
from automation.states import (
    COMMAND_LIVE,
    EVENT_TRANSITIONS,
    CommandStatus,
    EventStatus,
    ReasonCode,
)
from common.hot_models import column_time, column_value, model_columns, model_from_row, model_width
from common.hot_sql import hot_rows, in_list
from common.json_types import JsonValue
from common.ledger import Ledger, Move, Step, ledger_move
from devices.models import Device, DeviceInstanceEndpoint

EVENTS = AutomationEndpointEvent._meta.db_table
COMMANDS = DeviceCommand._meta.db_table
ENDPOINTS = DeviceInstanceEndpoint._meta.db_table
# Ends of a command that was sent and never answered for: the device may have applied it.
COMMAND_ENDED_UNSEEN = (CommandStatus.EXPIRED, CommandStatus.UNCERTAIN)
_LIVE = sorted(COMMAND_LIVE)  # one statement text, whatever the set's order
# Endpoint events' ledger: a pending event ends once, stamped with its time; no version (the
# status is the guard: an event only ever leaves pending) and no audit table (the executions
# and the event's own reason say why).
ENDPOINT_EVENTS = Ledger(
    AutomationEndpointEvent,
    status="processing_status",
    version=None,
    touched="processed_at",
    edges=EVENT_TRANSITIONS,
)


def _json(model: type[models.Model], name: str, raw: object) -> JsonValue:
    return cast(JsonValue, column_value(model, name, raw))


class PendingEvent(NamedTuple):
    event: AutomationEndpointEvent
    farm_id: int  # of the device its endpoint is on now


def endpoint_events_pending_read(ids: Iterable[int]) -> list[PendingEvent]:
    """The events of ``ids`` still pending, with the farm their endpoint's device is in now:
    a rule decides on its own farm's readings only."""
    wanted = sorted(set(ids))
    if not wanted:
        return []
    ids_sql, params = in_list(wanted)
    rows = hot_rows(
        f"SELECT {model_columns(AutomationEndpointEvent, 'v')}, d.farm_id FROM {EVENTS} v "
        f"JOIN {ENDPOINTS} e ON e.id = v.device_instance_endpoint_id "
        f"JOIN {Device._meta.db_table} d ON d.id = e.device_id "
        f"WHERE v.id IN {ids_sql} AND v.processing_status = %s ORDER BY v.id",
        [*params, str(EventStatus.PENDING)],
    )
    width = model_width(AutomationEndpointEvent)
    out: list[PendingEvent] = []
    for row in rows:
        event = model_from_row(AutomationEndpointEvent, row)
        assert event is not None
        out.append(PendingEvent(event, int(row[width])))
    return out


def endpoint_events_finish(
    ends: Mapping[int, tuple[EventStatus, ReasonCode]], *, now: datetime
) -> set[int]:
    """Moves of the endpoint events' ledger, one statement for every outcome: only a
    still-pending event moves, so a late duplicate changes nothing. The ids of the events
    that moved."""
    pending = str(EventStatus.PENDING)
    moves = [
        Move(pk, pending, None, [Step(str(status))], {"status_reason": str(reason)})
        for pk, (status, reason) in sorted(ends.items())
    ]
    return ledger_move(ENDPOINT_EVENTS, moves, now=now)


class LiveCommand(NamedTuple):
    id: int
    endpoint_id: int
    value: JsonValue
    status: str
    attempt_count: int
    rule_id: int | None
    rule_priority: int | None  # read only when asked (``commands_live_read``)
    execution_id: int | None
    rollout_priority: int | None  # of the rollout that sent it, if one did


def _rollout_tables() -> tuple[str, str]:
    """The rollouts app sits above this one: its tables by the relation, not by import."""
    target = DeviceCommand._meta.get_field("rollout_target").related_model
    assert isinstance(target, type)
    rollout = target._meta.get_field("rollout").related_model
    assert isinstance(rollout, type)
    return target._meta.db_table, rollout._meta.db_table


@functools.cache
def _live_statement(count: int, rule_priority: bool) -> str:
    targets, rollouts = _rollout_tables()
    rules = AutomationRule._meta.db_table
    return (
        "SELECT c.id, c.target_device_endpoint_id, c.target_value, c.status, c.attempt_count, "
        f"c.rule_id, {'r.priority' if rule_priority else 'NULL'}, c.rule_execution_id, "
        f"o.priority FROM {COMMANDS} c "
        f"LEFT JOIN {targets} t ON t.command_id = c.id "
        f"LEFT JOIN {rollouts} o ON o.id = t.rollout_id "
        + (f"LEFT JOIN {rules} r ON r.id = c.rule_id " if rule_priority else "")
        + f"WHERE c.status IN {in_list(_LIVE)[0]} "
        f"AND c.target_device_endpoint_id IN {in_list([0] * count)[0]} ORDER BY c.id"
    )


def commands_live_read(endpoint_ids: Iterable[int], *, rule_priority: bool) -> list[LiveCommand]:
    """The live commands on these endpoints, oldest first; each with its rule's priority
    when ``rule_priority`` (a caller without the rule cache's priorities)."""
    ids = sorted(set(endpoint_ids))
    if not ids:
        return []
    rows = hot_rows(_live_statement(len(ids), rule_priority), [*_LIVE, *ids])
    commands = [LiveCommand(*row) for row in rows]
    return [c._replace(value=_json(DeviceCommand, "target_value", c.value)) for c in commands]


class ManualHold(NamedTuple):
    """An operator's manual command holding its endpoint against rules until ``until``."""

    command_id: int
    until: datetime


class EndpointReported(NamedTuple):
    """What an endpoint last reported, and what may hold it against a decision."""

    id: int
    value: JsonValue
    value_at: datetime | None
    edited_at: datetime | None  # the endpoint's last configuration edit
    # The last sending of a command on it that ended without the device's word.
    unsure_since: datetime | None
    hold: ManualHold | None  # not cancelled; whether it still holds depends on the time
    cooldowns: list[CommandCooldown]  # one per value that failed on it


@functools.cache
def _reported_statement(count: int) -> str:
    holds = EndpointManualHold._meta.db_table
    cooldowns = CommandCooldown._meta.db_table
    return (
        "SELECT e.id, e.last_value, e.last_value_at, e.updated_at, "
        f"(SELECT u.dispatched_at FROM {COMMANDS} u "
        "WHERE u.target_device_endpoint_id = e.id AND u.status IN (%s, %s) "
        "AND u.dispatched_at IS NOT NULL ORDER BY u.dispatched_at DESC LIMIT 1), "
        f"h.intent_id, h.until, {model_columns(CommandCooldown, 'k')} FROM {ENDPOINTS} e "
        f"LEFT JOIN {holds} h ON h.endpoint_id = e.id AND h.cancelled_at IS NULL "
        f"LEFT JOIN {cooldowns} k ON k.target_device_endpoint_id = e.id "
        f"WHERE e.id IN {in_list([0] * count)[0]} ORDER BY e.id, k.id"
    )


def endpoints_reported_read(endpoint_ids: Iterable[int]) -> list[EndpointReported]:
    """Each endpoint's last report, manual hold and cool-downs, in one statement (an endpoint
    comes once per cool-down, at least once)."""
    ids = sorted(set(endpoint_ids))
    if not ids:
        return []
    rows = hot_rows(_reported_statement(len(ids)), [*map(str, COMMAND_ENDED_UNSEEN), *ids])
    out: list[EndpointReported] = []
    for pk, value, value_at, edited_at, unsure_since, hold_command, hold_until, *rest in rows:
        cooldown = model_from_row(CommandCooldown, rest)
        if out and out[-1].id == pk:
            if cooldown is not None:
                out[-1].cooldowns.append(cooldown)
            continue
        hold = None
        if hold_command is not None:
            until = column_time(EndpointManualHold, "until", hold_until)
            assert until is not None  # the column is not nullable
            hold = ManualHold(int(hold_command), until)
        out.append(
            EndpointReported(
                id=int(pk),
                value=_json(DeviceInstanceEndpoint, "last_value", value),
                value_at=column_time(DeviceInstanceEndpoint, "last_value_at", value_at),
                edited_at=column_time(DeviceInstanceEndpoint, "updated_at", edited_at),
                unsure_since=column_time(DeviceCommand, "dispatched_at", unsure_since),
                hold=hold,
                cooldowns=[cooldown] if cooldown is not None else [],
            )
        )
    return out


# (event, occurrence, rule, target endpoint, execution id, outcome) of an execution.
ExecutionKey = tuple[int | None, int | None, int, int, int, str]


def executions_read(
    *, event_ids: Iterable[int], occurrence_ids: Iterable[int], rule_ids: Iterable[int]
) -> list[ExecutionKey]:
    """The executions of these rules for these events or occurrences."""
    clauses: list[str] = []
    params: list[object] = []
    for column, values in (("event_id", event_ids), ("occurrence_id", occurrence_ids)):
        wanted = sorted(set(values))
        if wanted:
            ids_sql, ids = in_list(wanted)
            clauses.append(f"{column} IN {ids_sql}")
            params.extend(ids)
    rules_sql, rules = in_list(sorted(set(rule_ids)))
    if not clauses or not rules:
        return []
    rows = hot_rows(
        "SELECT event_id, occurrence_id, rule_id, target_endpoint_id, id, outcome "
        f"FROM {AutomationRuleExecution._meta.db_table} "
        f"WHERE ({' OR '.join(clauses)}) AND rule_id IN {rules_sql}",
        [*params, *rules],
    )
    return [(e, o, int(r), int(t), int(pk), str(outcome)) for e, o, r, t, pk, outcome in rows]


def commands_pending_by_key(keys: Sequence[str]) -> list[tuple[int, int]]:
    """(id, target endpoint) of the commands with these idempotency keys still pending
    dispatch, by id."""
    if not keys:
        return []
    keys_sql, params = in_list(sorted(set(keys)))
    rows = hot_rows(
        f"SELECT id, target_device_endpoint_id FROM {COMMANDS} "
        f"WHERE idempotency_key IN {keys_sql} AND status = %s ORDER BY id",
        [*params, str(CommandStatus.PENDING_DISPATCH)],
    )
    return [(int(pk), int(endpoint_id)) for pk, endpoint_id in rows]


def commands_unsent_read(ids: Iterable[int]) -> list[DeviceCommand]:
    """The commands of ``ids`` never sent (pending dispatch, no attempt), by id: the ones a
    newer decision may still replace."""
    wanted = sorted(set(ids))
    if not wanted:
        return []
    ids_sql, params = in_list(wanted)
    rows = hot_rows(
        f"SELECT {model_columns(DeviceCommand, 'c')} FROM {COMMANDS} c "
        f"WHERE c.id IN {ids_sql} AND c.status = %s AND c.attempt_count = 0 ORDER BY c.id",
        [*params, str(CommandStatus.PENDING_DISPATCH)],
    )
    commands = [model_from_row(DeviceCommand, row) for row in rows]
    return [c for c in commands if c is not None]
