"""A rollout's state moves: each one a compare-and-set on (state, version) with its audit
row in the same transaction. Stopping (abort, cancel, a closed window) skips the targets not
yet sent and expires their commands that were made but never sent; commands already sent
run to their end (a device cannot be un-sent a command)."""

from __future__ import annotations

from datetime import datetime

from django.db import transaction
from django.db.models import F
from django.utils import timezone

from alarms.services import alarm_raise
from alarms.states import AlarmSeverity, AlarmSource, AlarmType
from automation.models import DeviceCommand
from automation.services.manual import Actor
from automation.services.targets import targets_lock
from automation.services.transitions import GuardedTransition, Transition, guarded_transitions_apply
from automation.states import CommandStatus, ReasonCode
from common.audit.writes import audited_update
from common.json_types import JsonValue
from rollouts.models import Rollout, RolloutTarget, RolloutTransition
from rollouts.states import ROLLOUT_ENDED, RolloutState, SkipReason, TargetStep, rollout_can_move
from scheduler.services.support import support_note


class RolloutMoveRefused(ValueError):
    """The rollout is not in a state the move starts from (a 409 for the API)."""


def rollout_move(
    rollout: Rollout,
    to: RolloutState,
    *,
    reason: str,
    now: datetime,
    actor_id: int | None = None,
    tripped: JsonValue = None,
) -> bool:
    """Move ``rollout`` (as read) to ``to``; False when another writer moved it first."""
    if not rollout_can_move(rollout.state, to):
        return False
    # A move ends any tick in progress (its release no longer matches the version), so the
    # lease goes with it and the next tick need not wait for the lease to run out.
    fields: dict[str, object] = {"state": to, "updated_at": now, "lease_expires_at": None}
    if to in ROLLOUT_ENDED:
        fields["ended_at"] = now
    if tripped is not None:
        fields["tripped"] = tripped
    if to == RolloutState.RUNNING:
        fields["ticked_at"] = now  # the rate budget accrues from here, not across the pause
        fields["rate_budget"] = 0.0
    current = Rollout.objects.filter(pk=rollout.pk, state=rollout.state, version=rollout.version)
    moved = audited_update(current, version=F("version") + 1, **fields)
    if moved != 1:
        return False
    RolloutTransition.objects.create(
        rollout=rollout,
        from_state=rollout.state,
        to_state=to,
        actor_id=actor_id,
        reason=reason[:400],
        at=now,
    )
    rollout.state, rollout.version = to, rollout.version + 1
    if to == RolloutState.RUNNING:
        rollout.ticked_at, rollout.rate_budget = now, 0.0
    if to == RolloutState.ABORTED:
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
    skipped = pending.update(step=TargetStep.SKIPPED, reason=reason, updated_at=now)
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


_ACTIONS: dict[str, tuple[RolloutState, SkipReason | None]] = {
    "pause": (RolloutState.PAUSED, None),
    "resume": (RolloutState.RUNNING, None),
    "cancel": (RolloutState.CANCELLED, SkipReason.CANCELLED),
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
        if action == "resume" and rollout.state != RolloutState.PAUSED:
            raise RolloutMoveRefused(f"a {rollout.state} rollout cannot be resumed")
        actor_id = actor.pk if actor.is_authenticated else None
        if not rollout_move(rollout, to, reason=note, now=now, actor_id=actor_id):
            raise RolloutMoveRefused(f"a {rollout.state} rollout cannot be {to}")
        if skip is not None:
            unsent_stop(rollout, skip, now)
    return rollout
