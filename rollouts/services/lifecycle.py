"""A rollout's status moves: each one a move of its ledger (``rollouts.services.moves``), a
compare-and-set on (status, version) with its timeline row in the same statement. Stopping
(abort, cancel, a closed window) skips the targets not yet sent and expires their commands
that were made but never sent; commands already sent run to their end (a device cannot be
un-sent a command)."""

from __future__ import annotations

from datetime import datetime

from django.db import transaction
from django.utils import timezone

from alarms.services import alarm_raise
from alarms.states import AlarmSeverity, AlarmSource, AlarmType
from automation.models import DeviceCommand
from automation.services.manual import Actor
from automation.services.targets import targets_lock
from automation.services.transitions import GuardedTransition, Transition, guarded_transitions_apply
from automation.states import CommandStatus, ReasonCode
from common.json_types import JsonValue
from common.ledger import Move, Step, ledger_move, ledger_move_row
from rollouts.models import Rollout, RolloutTarget
from rollouts.services.moves import ROLLOUT_TARGETS, ROLLOUTS, rollout_step
from rollouts.states import ROLLOUT_ENDED, RolloutStatus, SkipReason, TargetStep
from scheduler.services.support import support_note


class RolloutMoveRefused(ValueError):
    """The rollout is not in a state the move starts from (a 409 for the API)."""


def rollout_move(
    rollout: Rollout,
    to: RolloutStatus,
    *,
    reason: str,
    now: datetime,
    actor_id: int | None = None,
    tripped: JsonValue = None,
) -> bool:
    """Move ``rollout`` (as read) to ``to``; False when another writer moved it first."""
    # A move ends any tick in progress (its release no longer matches the version), so the
    # lease goes with it and the next tick need not wait for the lease to run out.
    sets: dict[str, object] = {"lease_expires_at": None}
    if to in ROLLOUT_ENDED:
        sets["ended_at"] = now
    if tripped is not None:
        sets["tripped"] = tripped
    if to == RolloutStatus.RUNNING:
        sets["ticked_at"] = now  # the rate budget accrues from here, not across the pause
        sets["rate_budget"] = 0.0
    step = rollout_step(to, reason=reason, actor_id=actor_id)
    if not ledger_move_row(ROLLOUTS, rollout, steps=[step], sets=sets, now=now):
        return False
    if to == RolloutStatus.ABORTED:
        _aborted_alarm_raise(rollout, reason=reason, now=now)
    return True


def _aborted_alarm_raise(rollout: Rollout, *, reason: str, now: datetime) -> None:
    """An aborted rollout needs a person: an alarm in the same transaction as the move. One
    open alarm per rollout, on its first farm (an alarm belongs to one farm)."""
    farm_id = rollout.farms.order_by("pk").values_list("pk", flat=True).first()
    if farm_id is None:
        return
    alarm_raise(
        farm_id=farm_id,
        source=AlarmSource.ROLLOUT,
        source_id=rollout.pk,
        type=AlarmType.ROLLOUT_ABORTED,
        severity=AlarmSeverity.MAJOR,
        detail=f"rollout {rollout.name!r} aborted: {reason}",
        actor="rollout driver",
        now=now,
    )


def unsent_stop(
    rollout: Rollout, reason: SkipReason, now: datetime, *, farm_ids: list[int] | None = None
) -> int:
    """Skip the rollout's pending targets (of ``farm_ids`` only, when given) and expire its
    commands never sent, under their endpoints' locks so dispatch cannot claim one between
    the read and the move. Returns the number of targets stopped."""
    pending = RolloutTarget.objects.filter(rollout=rollout, step=TargetStep.PENDING)
    unsent = DeviceCommand.objects.filter(
        rollout_target__rollout=rollout, status=CommandStatus.PENDING_DISPATCH, attempt_count=0
    )
    if farm_ids is not None:
        pending = pending.filter(endpoint__device__farm_id__in=farm_ids)
        unsent = unsent.filter(target_device__farm_id__in=farm_ids)
    skip, sets = Step(TargetStep.SKIPPED), {"reason": reason}
    moves = [
        Move(pk, TargetStep.PENDING, None, [skip], sets)
        for pk in pending.values_list("pk", flat=True)
    ]
    skipped = len(ledger_move(ROLLOUT_TARGETS, moves, now=now))
    commands = list(unsent)
    targets_lock([c.target_device_endpoint_id for c in commands])
    detail = f"rollout #{rollout.pk} {reason}"
    guarded_transitions_apply(
        [
            GuardedTransition(
                c, [Transition(CommandStatus.EXPIRED, ReasonCode.ROLLOUT_STOPPED, detail)]
            )
            for c in commands
        ],
        now=now,
    )
    return skipped + len(commands)


_ACTIONS: dict[str, tuple[RolloutStatus, SkipReason | None]] = {
    "pause": (RolloutStatus.PAUSED, None),
    "resume": (RolloutStatus.RUNNING, None),
    "cancel": (RolloutStatus.CANCELLED, SkipReason.CANCELLED),
}


def rollout_act(
    *, rollout_id: int, action: str, actor: Actor, reason: str, now: datetime | None = None
) -> Rollout:
    """Pause, resume or cancel, audited with the actor and the reason. Raises
    ``Rollout.DoesNotExist``, ``RolloutMoveRefused`` or, for a blank reason,
    ``scheduler.services.support.SupportReasonMissing``."""
    note = support_note(actor.get_username(), reason)
    now = now or timezone.now()
    to, skip = _ACTIONS[action]
    with transaction.atomic():
        rollout = Rollout.objects.select_for_update().get(pk=rollout_id)
        if action == "resume" and rollout.status != RolloutStatus.PAUSED:
            raise RolloutMoveRefused(f"a {rollout.status} rollout cannot be resumed")
        actor_id = actor.pk if actor.is_authenticated else None
        if not rollout_move(rollout, to, reason=note, now=now, actor_id=actor_id):
            raise RolloutMoveRefused(f"a {rollout.status} rollout cannot be {to}")
        if skip is not None:
            unsent_stop(rollout, skip, now)
    return rollout
