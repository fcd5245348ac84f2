"""One wave: claim the next pending targets within each open farm's room under the per-farm
cap, decide precedence for each (a manual hold, a higher-priority rule's live command, a gate
that now refuses), and start the rest as ordinary commands of the ledger, all set-based: the
statements do not grow with the wave (``tests/rollouts/test_wave_cost.py``).

A target's command key is ``rollout:{rolloutId}:{endpointId}``: whatever re-runs a wave (a
redelivered task, a killed worker's successor, a second beat), the ledger holds one command
per target, and the target's move to ``sent`` commits with it. A wave is no move of the
rollout: its record is its targets', each sent or skipped with the wave's number."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from django.db.models import Count

from automation.gates import command_gate_failure
from automation.keys import rollout_command_idempotency_key
from automation.models import DeviceCommand
from automation.services.commands import CommandRow, command_fields
from automation.services.manual import manual_holds_active
from automation.services.targets import (
    NewCommand,
    Ranked,
    commands_supersede_unsent,
    target_states_load,
    targets_lock,
)
from automation.services.transitions import CommandInsert, Transition, commands_insert
from automation.states import COMMAND_LIVE, CommandOrigin, CommandStatus, ReasonCode
from common.ledger import Move, Step, ledger_move
from devices.models import DeviceInstanceEndpoint
from rollouts.models import Rollout, RolloutTarget
from rollouts.services.moves import ROLLOUT_TARGETS
from rollouts.services.selection import skip_reason
from rollouts.states import SkipReason, TargetStep

SEND, SKIP = Step(TargetStep.SENT), Step(TargetStep.SKIPPED)


@dataclass(frozen=True)
class Wave:
    commands: list[int]  # the commands started, to dispatch after commit
    skipped: int


def farms_room(rollout: Rollout, farm_ids: Sequence[int]) -> dict[int, int]:
    """How many more commands each farm may have live under the rollout's cap: every live
    command of the farm counts, whatever its origin (one grouped query)."""
    live = dict(
        DeviceCommand.objects.filter(status__in=COMMAND_LIVE, target_device__farm_id__in=farm_ids)
        .values_list("target_device__farm_id")
        .annotate(n=Count("id"))
        .order_by()
    )
    return {farm: max(0, rollout.max_live_per_farm - live.get(farm, 0)) for farm in farm_ids}


def _claim(rollout: Rollout, quota: int, farm_ids: Sequence[int]) -> list[tuple[int, int]]:
    """(target, endpoint) of the next pending targets, oldest first, at most each farm's
    room; locked and skipped by a concurrent driver (one query per open farm, whatever the
    wave's size)."""
    room = farms_room(rollout, farm_ids)
    picked: list[tuple[int, int]] = []
    for farm in sorted(farm_ids):
        n = min(room[farm], quota - len(picked))
        if n <= 0:
            continue
        rows = (
            RolloutTarget.objects.filter(
                rollout=rollout, step=TargetStep.PENDING, endpoint__device__farm_id=farm
            )
            .order_by("pk")
            .select_for_update(skip_locked=True, of=("self",))
            .values_list("pk", "endpoint_id")[:n]
        )
        picked.extend(rows)
    return picked


def wave_start(rollout: Rollout, quota: int, farm_ids: Sequence[int], now: datetime) -> Wave:
    """Start up to ``quota`` targets of the open farms ``farm_ids`` as wave ``waves + 1``."""
    picked = _claim(rollout, quota, farm_ids)
    if not picked:
        return Wave([], 0)
    endpoint_ids = [endpoint for _, endpoint in picked]
    endpoints = DeviceInstanceEndpoint.objects.select_related("device", "profile_endpoint")
    by_id = {e.pk: e for e in endpoints.filter(pk__in=endpoint_ids)}
    targets_lock(endpoint_ids)  # against decisions and manual commands on the same endpoints
    states = target_states_load(endpoint_ids)
    holds = manual_holds_active(endpoint_ids, now=now)
    skips: dict[SkipReason, list[int]] = defaultdict(list)
    sending: list[tuple[int, DeviceInstanceEndpoint]] = []
    for target_id, endpoint_id in picked:
        endpoint = by_id[endpoint_id]
        reason = _precedence(rollout, endpoint, states[endpoint_id].ranked, holds)
        if reason is None:
            sending.append((target_id, endpoint))
        else:
            skips[reason].append(target_id)
    wave = rollout.waves + 1
    commands = _commands_insert(rollout, sending, wave, now)
    sent = {target_id: commands[endpoint.pk] for target_id, endpoint in sending}
    # Latest decision wins: each command replaces its endpoint's unsent ones.
    new = NewCommand(rollout.value)
    replacing = {e.pk: states[e.pk].superseded(new) for _, e in sending}
    created = sorted((commands[e.pk], e.pk) for _, e in sending)
    dispatch = commands_supersede_unsent(replacing, created, now)
    # The targets record the wave: sent with their commands, or skipped with why.
    moves = [
        Move(target_id, TargetStep.PENDING, None, [SEND], {"command_id": command, "wave": wave})
        for target_id, command in sent.items()
    ]
    moves += [
        Move(target_id, TargetStep.PENDING, None, [SKIP], {"reason": reason, "wave": wave})
        for reason, ids in skips.items()
        for target_id in ids
    ]
    ledger_move(ROLLOUT_TARGETS, moves, now=now)
    skipped = sum(len(ids) for ids in skips.values())
    rollout.waves = wave
    return Wave(dispatch, skipped)


def _precedence(
    rollout: Rollout,
    endpoint: DeviceInstanceEndpoint,
    ranked: Sequence[Ranked],
    holds: dict[int, int],
) -> SkipReason | None:
    """Why this target is skipped now (docs/architecture.md, "Precedence"), or None."""
    if endpoint.pk in holds:
        return SkipReason.MANUAL_OVERRIDE
    if any(r.priority > rollout.priority for r in ranked):
        return SkipReason.LOWER_PRIORITY
    return skip_reason(command_gate_failure(None, endpoint, value=rollout.value))


def _commands_insert(
    rollout: Rollout,
    sending: list[tuple[int, DeviceInstanceEndpoint]],
    wave: int,
    now: datetime,
) -> dict[int, int]:
    """Endpoint → its command for this rollout: inserted (one INSERT, a key already in the
    ledger absorbed) and read back by key (one SELECT), with their audit rows (one INSERT)."""
    if not sending:
        return {}
    keys = {
        e.pk: rollout_command_idempotency_key(rollout_id=rollout.pk, endpoint_id=e.pk)
        for _, e in sending
    }
    rows = [
        CommandRow(
            origin=CommandOrigin.ROLLOUT,
            target_device=e.device_id,
            target_device_endpoint=e.pk,
            columns=command_fields(e, rollout.value, key=keys[e.pk], now=now),
        )
        for _, e in sending
    ]
    detail = f"rollout #{rollout.pk} wave {wave}"
    step = Transition(CommandStatus.PENDING_DISPATCH, ReasonCode.ROLLOUT, detail)
    # Counted once committed, by reason: farm_command_transitions_total{reason="rollout"}.
    commands_insert([CommandInsert(row, step) for row in rows], now=now)
    return dict(
        DeviceCommand.objects.filter(idempotency_key__in=list(keys.values())).values_list(
            "target_device_endpoint_id", "pk"
        )
    )
