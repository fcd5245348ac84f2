"""The dispatcher's claim: a lease on each command and its endpoint's inflight slot, taken
for a whole batch in one move of the commands' ledger with no steps (the status stays, the
end of the attempt is audited), a guarded UPDATE (docs/architecture.md, "dispatch")."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum

from django.conf import settings
from django.db import IntegrityError, transaction

from automation.keys import new_device_command_id
from automation.models import DeviceCommand
from automation.services.targets import targets_lock
from automation.services.transitions import COMMANDS
from automation.states import CommandStatus
from common.ledger import Move, ledger_move, ledger_row_follow


class DispatchOutcome(StrEnum):
    DISPATCHED = "dispatched"
    NOT_DISPATCHABLE = "not_dispatchable"
    NOT_DUE = "not_due"
    LEASED = "leased"
    ENDPOINT_BUSY = "endpoint_busy"
    LOST_RACE = "lost_race"
    GATE_FAILED = "gate_failed"
    RETRY_SCHEDULED = "retry_scheduled"
    EXPIRED = "expired"
    BROKER_UNREACHABLE = "broker_unreachable"  # waiting for the publisher; no attempt spent


@dataclass(frozen=True)
class _Claim:
    """What a claim writes on one command: its attempt, its lease and its endpoint's slot."""

    attempt_count: int
    lease_expires_at: datetime
    inflight_endpoint_id: int
    device_command_id: str

    @classmethod
    def of(cls, command: DeviceCommand, now: datetime) -> _Claim:
        return cls(
            attempt_count=command.attempt_count + 1,
            lease_expires_at=now + timedelta(seconds=settings.DISPATCH_LEASE_S),
            inflight_endpoint_id=command.target_device_endpoint_id,
            device_command_id=command.device_command_id or new_device_command_id(),
        )

    def taken(self, command: DeviceCommand, now: datetime) -> None:
        """The claimed command follows in memory, as the row now reads."""
        ledger_row_follow(COMMANDS, command, _claim_move(command, self), now=now)


def commands_claim(
    ready: list[DeviceCommand],
    now: datetime,
    outcomes: dict[int, DispatchOutcome],
    holders: dict[int, int],
) -> list[DeviceCommand]:
    """Lease the commands and take their endpoints' inflight slots in one UPDATE, each row on
    the (status, version) it was read with. One command per endpoint: a second of the batch,
    or one whose endpoint another command holds, is ``endpoint_busy``. Commands never sent
    are claimed under their endpoints' evaluation locks: evaluation may be replacing them
    (``automation.services.targets``), and a replaced command must not go out after all.
    ``holders`` (endpoint id -> the command holding its slot) come with the batch's read
    (``automation.services.dispatch_sql``); one taken since is caught by the unique key."""
    chosen: dict[int, DeviceCommand] = {}
    for command in ready:
        endpoint_id = command.target_device_endpoint_id
        holder = holders.get(endpoint_id, command.pk)
        if holder != command.pk or endpoint_id in chosen:
            outcomes[command.pk] = DispatchOutcome.ENDPOINT_BUSY
        else:
            chosen[endpoint_id] = command
    claims = [_Claim.of(i, now) for i in chosen.values()]
    moves = [_claim_move(i, c) for i, c in zip(chosen.values(), claims, strict=True)]
    try:
        with transaction.atomic():
            targets_lock(
                i.target_device_endpoint_id
                for i in chosen.values()
                if i.status == CommandStatus.PENDING_DISPATCH and i.attempt_count == 0
            )
            moved = ledger_move(COMMANDS, moves, now=now)
    except IntegrityError:  # a concurrent claim took one of the endpoints: row by row
        return [i for i in chosen.values() if _claim_one(i, now, outcomes)]
    claimed: list[DeviceCommand] = []
    for command, claim in zip(chosen.values(), claims, strict=True):
        if command.pk not in moved:
            outcomes[command.pk] = DispatchOutcome.LOST_RACE
            continue
        claim.taken(command, now)
        claimed.append(command)
    return claimed


def _claim_move(command: DeviceCommand, claim: _Claim) -> Move:
    """The claim as a move of the commands' ledger with no steps: from the (status, version)
    the command was read with, its status kept."""
    sets = {
        "attempt_count": claim.attempt_count,
        "lease_expires_at": claim.lease_expires_at,
        "inflight_endpoint": claim.inflight_endpoint_id,
        "device_command_id": claim.device_command_id,
    }
    return Move(command.pk, command.status, command.version, (), sets)


def _claim_one(command: DeviceCommand, now: datetime, outcomes: dict[int, DispatchOutcome]) -> bool:
    """The claim of one command, after a batch claim met a concurrent one."""
    claim = _Claim.of(command, now)
    try:
        with transaction.atomic():
            if command.status == CommandStatus.PENDING_DISPATCH and command.attempt_count == 0:
                targets_lock([command.target_device_endpoint_id])
            moved = ledger_move(COMMANDS, [_claim_move(command, claim)], now=now)
    except IntegrityError:
        outcomes[command.pk] = DispatchOutcome.ENDPOINT_BUSY
        return False
    if not moved:
        outcomes[command.pk] = DispatchOutcome.LOST_RACE
        return False
    claim.taken(command, now)
    return True
