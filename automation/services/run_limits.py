"""Run-time limits: a command may carry ``max_on_s`` (a rule action's, or an operator's on a
manual command), and once it is ``applied`` a command back to ``max_on_value`` (or, left
out, the endpoint's ``safe_value``) becomes due ``max_on_s`` later, so an output a rule or a
person switched on does not stay on when nothing else switches it off.

* The due work is one scheduler row keyed ``run-limit:{commandId}``, ensured in the
  transaction that moves the command to ``applied`` (``automation.services.transitions``):
  it exists exactly when the command applied, and once however often that is redelivered.
* At due time its handler (``automation.services.run_limit_due``) creates the follow-up
  once (its idempotency key is the row's key) unless a later command changed the endpoint
  first, or the endpoint already reports the value.

The checks here are pure, so the rule API, the admin, the manual command API and code refuse
the same limit with the same messages."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TypedDict

from automation.models import DeviceCommand
from automation.models.rules import MAX_ON_MAX_S
from common.json_types import JsonValue
from devices.models import DeviceInstanceEndpoint
from devices.values import value_violation
from scheduler.keys import run_limit_key, scheduler_input_hash
from scheduler.services import scheduler_ensure

__all__ = [
    "MAX_ON_MAX_S",
    "NO_LIMIT",
    "RunLimit",
    "RunLimitInvalid",
    "run_limit_errors",
    "run_limit_input",
    "run_limit_value",
    "run_limits_ensure",
]


@dataclass(frozen=True)
class RunLimit:
    """What a command carries: back to ``max_on_value`` (None: the endpoint's safe value at
    due time) ``max_on_s`` after it applied; no limit when ``max_on_s`` is None."""

    max_on_s: int | None = None
    max_on_value: JsonValue = None


NO_LIMIT = RunLimit()


class RunLimitInvalid(ValueError):
    """Field name -> what is wrong with the limit (``run_limit_errors``)."""

    def __init__(self, errors: dict[str, str]) -> None:
        super().__init__(errors)
        self.errors = errors


def run_limit_errors(
    endpoint: DeviceInstanceEndpoint, max_on_s: object, max_on_value: JsonValue
) -> dict[str, str]:
    """What is wrong with limiting a command for ``endpoint`` to ``max_on_s`` seconds, back to
    ``max_on_value`` (or the endpoint's ``safe_value``); {} when nothing is."""
    if max_on_s is None:
        return {"max_on_value": "only with max_on_s"} if max_on_value is not None else {}
    if (
        isinstance(max_on_s, bool)
        or not isinstance(max_on_s, int)
        or not 1 <= max_on_s <= MAX_ON_MAX_S
    ):
        return {"max_on_s": f"must be a whole number of seconds from 1 to {MAX_ON_MAX_S}"}
    profile = endpoint.profile_endpoint
    if not profile.writable:
        return {"max_on_s": "only on a writable endpoint"}
    if max_on_value is None:
        if profile.safe_value is None:
            return {"max_on_value": "required: the endpoint declares no safe_value"}
        return {}
    violation = value_violation(profile, max_on_value)
    return {"max_on_value": str(violation)} if violation is not None else {}


def run_limit_value(command: DeviceCommand) -> JsonValue:
    """The value the follow-up sets: the command's own, else the endpoint's safe value now
    (``target_device_endpoint__profile_endpoint`` loaded); None when there is none."""
    if command.max_on_value is not None:
        return command.max_on_value
    safe: JsonValue = command.target_device_endpoint.profile_endpoint.safe_value
    return safe


class RunLimitInput(TypedDict):
    """What a run-limit row is hashed from: the command and the limit it carried."""

    command: int
    maxOnS: int
    value: JsonValue


def run_limit_input(command: DeviceCommand) -> RunLimitInput:
    return {
        "command": command.pk,
        "maxOnS": int(command.max_on_s or 0),
        "value": command.max_on_value,
    }


def run_limits_ensure(
    *, applied: Sequence[tuple[DeviceCommand, datetime]], farms: Mapping[int, int], now: datetime
) -> int:
    """The due work of these applied commands (each with its applied time; ``farms``: device
    id -> farm id), due at applied time + ``max_on_s``; how many were ensured. Called in the
    transaction of the move to applied."""
    for command, applied_at in applied:
        scheduler_ensure(
            key=run_limit_key(command_id=command.pk),
            scheduled_on=applied_at + timedelta(seconds=int(command.max_on_s or 0)),
            input_hash=scheduler_input_hash(run_limit_input(command)),
            farm_id=farms.get(command.target_device_id),
            now=now,
        )
    return len(applied)
