"""Manual control: an operator sets an endpoint's value on the exact path a rule's decision
takes, and holds the endpoint against the farm's rules for a while.

* The same gates: the target's configuration gates (``automation.gates.target_failure``) and
  the device's status refuse the request before anything is written; dispatch re-checks
  every gate, freshness included, as for any command.
* One command per request: its key is built from the endpoint, the value, the user and the
  request's key (the API's ``Idempotency-Key``, or the key the admin form carries), so a
  repeated request finds the command it made.
* Latest decision wins, as for a newer rule decision: under the target's evaluation lock,
  the endpoint's commands never sent are superseded (``expired``/``superseded``); one already
  claimed or sent keeps its course and this one waits behind it (the dispatcher's inflight
  slot keeps one live command per endpoint). The normal dispatcher sends it, nudged after
  commit (the sweep otherwise), and it is ``applied`` only on the device's evidence.
* The hold: an ``EndpointManualHold`` until now + the farm's ``manual_override_minutes``;
  meanwhile rule decisions for the endpoint end ``suppressed``/``manual_override``
  (``automation.services.evaluate``). A newer manual command moves the hold to itself; a
  cancel ends it early, and the next reading is decided by the rules again.

Who asked and why is on the command (``requested_by``, ``request_reason``) and in its first
audit row (``CommandTransition``, reason ``manual``); who cancelled a hold and why is on the
hold and in its audit-log entry.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TypedDict

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.db import transaction
from django.db.models import F
from django.utils import timezone

from automation.gates import command_gate_failure
from automation.keys import manual_command_idempotency_key
from automation.models import DeviceCommand, EndpointManualHold
from automation.services.commands import CommandRow, command_fields
from automation.services.run_limits import RunLimit, RunLimitInvalid, run_limit_errors
from automation.services.spine import Committed, hand_on_commit
from automation.services.targets import (
    NewCommand,
    commands_supersede_unsent,
    target_states_load,
    targets_lock,
)
from automation.services.transitions import CommandInsert, Transition, commands_insert
from automation.states import CommandOrigin, CommandStatus, ReasonCode
from common.audit.writes import audited_update
from common.json_types import JsonValue
from devices.models import DeviceInstanceEndpoint
from scheduler.services.support import support_note

Actor = AbstractBaseUser | AnonymousUser

# What a refused request says, by the gate that refused it: (field, message). The device's
# status is a conflict (``ManualCommandRefused.conflict``): the request may succeed later.
_REFUSALS: dict[ReasonCode, tuple[str, str]] = {
    ReasonCode.VALUE_WRONG_TYPE: ("value", "is not of the endpoint's type"),
    ReasonCode.VALUE_OUT_OF_RANGE: ("value", "is outside the endpoint's min/max"),
    ReasonCode.VALUE_NOT_ALLOWED: ("value", "is not one of the endpoint's allowed values"),
    ReasonCode.TARGET_NOT_WRITABLE: ("non_field_errors", "the endpoint is not writable"),
    ReasonCode.TARGET_DISABLED: ("non_field_errors", "the endpoint is disabled"),
    ReasonCode.BINDING_INVALID: ("non_field_errors", "the endpoint has no RPC binding"),
    ReasonCode.TARGET_RETIRED: ("non_field_errors", "the device is retired"),
    ReasonCode.TARGET_MAINTENANCE: ("non_field_errors", "the device is in maintenance"),
}
_CONFLICTS = frozenset({ReasonCode.TARGET_RETIRED, ReasonCode.TARGET_MAINTENANCE})


class ManualCommandRefused(ValueError):
    """A gate refused the request: ``field`` and ``message`` for the caller, ``reason`` the
    gate's code; ``conflict`` when it is the device's state, not the request, that is wrong."""

    def __init__(self, reason: ReasonCode) -> None:
        self.reason = reason
        self.field, text = _REFUSALS.get(reason, ("non_field_errors", "refused"))
        self.message = f"{reason}: {text}"
        self.conflict = reason in _CONFLICTS
        super().__init__(self.message)


@dataclass(frozen=True)
class ManualCommand:
    """The command the request made (``created``) or the one an earlier identical request
    made, and the endpoint's hold after it."""

    command: DeviceCommand
    created: bool
    hold_until: datetime | None


def manual_command_refusal(target: DeviceInstanceEndpoint, value: JsonValue) -> ReasonCode | None:
    """The gate that refuses sending ``value`` to ``target`` by hand, known before dispatch
    (dispatch adds freshness: an offline device is retried, as for a rule's command)."""
    return command_gate_failure(None, target, value=value)


def endpoint_command_manual(
    *,
    endpoint_id: int,
    value: JsonValue,
    actor: Actor,
    reason: str,
    request_key: str | None = None,
    now: datetime | None = None,
    max_on_s: int | None = None,
    max_on_value: JsonValue = None,
) -> ManualCommand:
    """Set ``endpoint_id`` to ``value`` by hand (see the module docstring), for at most
    ``max_on_s`` when given (``automation.services.run_limits``). Raises
    ``DeviceInstanceEndpoint.DoesNotExist``, ``ManualCommandRefused``,
    ``RunLimitInvalid`` or, for a blank reason,
    ``scheduler.services.support.SupportReasonMissing``."""
    note = support_note(actor.get_username(), reason)
    now = now or timezone.now()
    target = DeviceInstanceEndpoint.objects.select_related("device__farm", "profile_endpoint").get(
        pk=endpoint_id
    )
    refused = manual_command_refusal(target, value)
    if refused is not None:
        raise ManualCommandRefused(refused)
    limit_errors = run_limit_errors(target, max_on_s, max_on_value)
    if limit_errors:
        raise RunLimitInvalid(limit_errors)
    user_id = actor.pk if actor.is_authenticated else None
    key = manual_command_idempotency_key(
        endpoint_id=target.pk,
        target_value=value,
        user_id=user_id,
        request_key=request_key or uuid.uuid4().hex,
    )
    existing = DeviceCommand.objects.filter(idempotency_key=key).first()
    if existing is not None:
        return ManualCommand(existing, False, manual_hold_until(endpoint_id=target.pk, now=now))
    limit = RunLimit(max_on_s, max_on_value)
    row = _command_row(target, value, key, user_id, reason.strip(), now, limit)
    until = now + timedelta(minutes=target.device.farm.manual_override_minutes)
    detail = f"{note} (rules held until {until:%Y-%m-%d %H:%M:%S} UTC)"
    step = Transition(CommandStatus.PENDING_DISPATCH, ReasonCode.MANUAL, detail)
    with transaction.atomic():
        targets_lock([target.pk])
        targets = target_states_load([target.pk])  # before the insert: what this replaces
        made = commands_insert([CommandInsert(row, step)], now=now)
        if not made:  # a concurrent twin of this request made it
            twin = DeviceCommand.objects.get(idempotency_key=key)
            return ManualCommand(twin, False, manual_hold_until(endpoint_id=target.pk, now=now))
        command = DeviceCommand.objects.get(pk=made[key])
        replacing = {target.pk: targets[target.pk].superseded(NewCommand(value))}
        commands_supersede_unsent(replacing, [(command.pk, target.pk)], now)
        _hold_move(target.pk, command, user_id, until, now)
        hand_on_commit(Committed(commands=[command.pk]))
    return ManualCommand(command, True, until if until > now else None)


def _command_row(
    target: DeviceInstanceEndpoint,
    value: JsonValue,
    key: str,
    user_id: int | None,
    reason: str,
    now: datetime,
    limit: RunLimit,
) -> CommandRow:
    return CommandRow(
        origin=CommandOrigin.MANUAL,
        requested_by=user_id,
        request_reason=reason[:400],
        target_device=target.device_id,
        target_device_endpoint=target.pk,
        columns=command_fields(target, value, key=key, now=now, limit=limit),
    )


class _HoldFields(TypedDict):
    """What moving a hold to a new command writes, whether it updates the row or creates it."""

    command: DeviceCommand
    requested_by_id: int | None
    until: datetime
    cancelled_at: None
    cancelled_by_id: None
    cancel_reason: str
    updated_at: datetime


def _hold_move(
    endpoint_id: int,
    command: DeviceCommand,
    user_id: int | None,
    until: datetime,
    now: datetime,
) -> None:
    """The endpoint's hold now belongs to ``command``, until ``until`` (a cancelled or expired
    hold is reopened). Called under the endpoint's lock, so no other hold write interleaves."""
    fields: _HoldFields = {
        "command": command,
        "requested_by_id": user_id,
        "until": until,
        "cancelled_at": None,
        "cancelled_by_id": None,
        "cancel_reason": "",
        "updated_at": now,
    }
    held = EndpointManualHold.objects.filter(endpoint_id=endpoint_id)
    moved = audited_update(held, version=F("version") + 1, **fields)
    if not moved:
        EndpointManualHold.objects.create(endpoint_id=endpoint_id, created_at=now, **fields)


def endpoint_hold_cancel(
    *, endpoint_id: int, actor: Actor, reason: str, now: datetime | None = None
) -> bool:
    """End the endpoint's active hold now, so the rules decide its next reading; False when
    no hold is active (then nothing is written). The who and why are on the hold
    (``cancelled_by``, ``cancel_reason``) and in its audit-log entry; the command that held
    it keeps its course, and its ledger records none of this: nothing moved it."""
    support_note(actor.get_username(), reason)  # refuses a blank reason
    now = now or timezone.now()
    with transaction.atomic():
        targets_lock([endpoint_id])
        hold = (
            EndpointManualHold.objects.select_related("command")
            .filter(endpoint_id=endpoint_id, cancelled_at__isnull=True, until__gt=now)
            .first()
        )
        if hold is None:
            return False
        moved = audited_update(
            EndpointManualHold.objects.filter(pk=hold.pk, version=hold.version),
            version=F("version") + 1,
            cancelled_at=now,
            cancelled_by_id=actor.pk if actor.is_authenticated else None,
            cancel_reason=reason.strip()[:400],
            updated_at=now,
        )
    return moved == 1


def manual_holds_active(endpoint_ids: Iterable[int], *, now: datetime) -> dict[int, int]:
    """Endpoint id → the manual command holding it, for the endpoints held at ``now`` (one
    query, whatever the number of endpoints)."""
    rows = EndpointManualHold.objects.filter(
        endpoint_id__in=set(endpoint_ids), cancelled_at__isnull=True, until__gt=now
    ).values_list("endpoint_id", "command_id")
    return dict(rows)


def manual_hold_until(*, endpoint_id: int, now: datetime | None = None) -> datetime | None:
    """When the endpoint's active hold ends, or None when it is not held."""
    return (
        EndpointManualHold.objects.filter(
            endpoint_id=endpoint_id, cancelled_at__isnull=True, until__gt=now or timezone.now()
        )
        .values_list("until", flat=True)
        .first()
    )
