"""The rollouts' two ledgers (``common.ledger``): a rollout moves along ``ROLLOUT_MOVES`` with
its timeline row, who and why, in the same statement, and every tick's lease is a guarded
update of the same row (its version); a target moves once, from ``pending`` to ``sent`` or
``skipped``, and keeps the wave that did it."""

from __future__ import annotations

from common.ledger import Ledger, Step
from rollouts.models import Rollout, RolloutTarget, RolloutTransition
from rollouts.states import ROLLOUT_MOVES, TARGET_MOVES

REASON_MAX_CHARS = 400
ROLLOUTS = Ledger(
    Rollout,
    touched="updated_at",
    audit=RolloutTransition,
    audit_row="rollout",
    edges=ROLLOUT_MOVES,
)
ROLLOUT_TARGETS = Ledger(
    RolloutTarget, status="step", version=None, touched="updated_at", edges=TARGET_MOVES
)


def rollout_step(to: str, *, reason: str, actor_id: int | None = None) -> Step:
    """A rollout's move as its timeline shows it: who (None: the driver) and why."""
    return Step(to, {"actor": actor_id, "reason": reason[:REASON_MAX_CHARS]})
