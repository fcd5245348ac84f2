"""Cool-downs: a device that cannot obey a command gets no storm of the same command.

After a command for (endpoint, value) ends ``failed`` or ``uncertain`` on the device's word
(a refusal, a contradicting state report, an ack with no proof), decisions asking for the
same pair are ``suppressed``/``cooldown`` for ``COMMAND_COOLDOWN_S[n-1]`` after the n-th
consecutive failure. What lifts it: an applied command for the pair (the row is deleted), a
support retry (deleted too), a change of the value the endpoint reports, an edit of the rule
or of the target endpoint (both compared by time, so no hook is needed in the editors).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import TypedDict

from django.conf import settings
from django.db.models import QuerySet

from automation.keys import target_value_key
from automation.models import AutomationRule, CommandCooldown, DeviceCommand
from automation.operators import values_equal
from automation.states import CommandStatus
from common.hot_sql import hot_run
from common.json_types import JsonValue
from devices.models import DeviceInstanceEndpoint

# Ends on the device's word that start or extend a cool-down.
COOLDOWN_STATUSES = frozenset({CommandStatus.FAILED, CommandStatus.UNCERTAIN})

CooldownKey = tuple[int, str]  # (target endpoint id, target value key)


class _CooldownFields(TypedDict):
    """What a failure writes on its pair's cool-down, whether it creates or extends it."""

    target_value: JsonValue
    failures: int
    until: datetime
    command: DeviceCommand
    reason_code: str
    reported_value: JsonValue
    updated_at: datetime


def cooldown_length_s(failures: int) -> float:
    ladder = settings.COMMAND_COOLDOWN_S
    return ladder[min(max(failures, 1), len(ladder)) - 1]


def cooldown_lifted(
    row: CommandCooldown,
    *,
    reported: JsonValue,
    endpoint_edited_at: datetime | None,
    rule_updated_at: datetime | None,
) -> bool:
    """True when something changed since the last failure that may let the device obey."""
    if not values_equal(reported, row.reported_value):
        return True  # the device reports another state now
    if endpoint_edited_at is not None and endpoint_edited_at > row.updated_at:
        return True
    return rule_updated_at is not None and rule_updated_at > row.updated_at


def cooldown_holds(
    row: CommandCooldown | None,
    *,
    rule: AutomationRule,
    reported: JsonValue,
    endpoint_edited_at: datetime | None,
    now: datetime,
) -> bool:
    if row is None or row.until <= now:
        return False
    return not cooldown_lifted(
        row,
        reported=reported,
        endpoint_edited_at=endpoint_edited_at,
        rule_updated_at=rule.updated_at,
    )


def command_cooldown_record(command: DeviceCommand, *, now: datetime) -> CommandCooldown:
    """Start or extend the pair's cool-down; call it in the transaction that ended ``command``.
    One live command per endpoint means failures of one pair never race each other."""
    key = target_value_key(command.target_value)
    endpoint = DeviceInstanceEndpoint.objects.get(pk=command.target_device_endpoint_id)
    row = (
        CommandCooldown.objects.select_for_update()
        .filter(target_device_endpoint_id=endpoint.pk, value_key=key)
        .first()
    )
    rule_updated_at = (  # a manual command has no rule whose edit could lift it
        AutomationRule.objects.filter(pk=command.rule_id)
        .values_list("updated_at", flat=True)
        .first()
        if command.rule_id is not None
        else None
    )
    chained = row is not None and not cooldown_lifted(
        row,
        reported=endpoint.last_value,
        endpoint_edited_at=endpoint.updated_at,
        rule_updated_at=rule_updated_at,
    )
    failures = row.failures + 1 if row is not None and chained else 1
    fields: _CooldownFields = {
        "target_value": command.target_value,
        "failures": failures,
        "until": now + timedelta(seconds=cooldown_length_s(failures)),
        "command": command,
        "reason_code": command.status_reason,
        "reported_value": endpoint.last_value,
        "updated_at": now,
    }
    if row is None:
        return CommandCooldown.objects.create(
            target_device_endpoint_id=endpoint.pk, value_key=key, **fields
        )
    for name, value in fields.items():
        setattr(row, name, value)
    row.save(update_fields=list(fields))
    return row


def command_cooldown_clear(*, endpoint_id: int, value: JsonValue) -> int:
    """The pair was applied, or support asked to try again: no cool-down any more."""
    return command_cooldowns_clear([(endpoint_id, value)])


@functools.cache
def _cooldowns_clear_statement(count: int) -> str:
    """A row-value IN list of (endpoint, value key): one text per batch size, which the
    unique key serves on both databases."""
    pairs = ", ".join(["(%s, %s)"] * count)
    return (
        f"DELETE FROM {CommandCooldown._meta.db_table} "
        f"WHERE (target_device_endpoint_id, value_key) IN ({pairs})"
    )


def command_cooldowns_clear(pairs: Sequence[tuple[int, JsonValue]]) -> int:
    """``command_cooldown_clear`` for many (endpoint, value) pairs (reconcile's applied
    commands) in one hand-written statement; how many there were."""
    keys = sorted({(endpoint_id, target_value_key(value)) for endpoint_id, value in pairs})
    if not keys:
        return 0
    return hot_run(_cooldowns_clear_statement(len(keys)), [v for key in keys for v in key])


def command_cooldowns_cooling(*, now: datetime) -> QuerySet[CommandCooldown]:
    """Rows still cooling down by time; lifting by a new report or an edit is checked at
    decision time, so this is an upper bound (what /metrics and diagnostics show)."""
    return CommandCooldown.objects.filter(until__gt=now)
