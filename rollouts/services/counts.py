"""A rollout's counters per target state, read from the ledger itself: a sent target's state
is its command's status, so the counters cannot drift from what the commands did."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from django.db.models import Count, Min, Q

from automation.states import COMMAND_LIVE, COMMAND_TERMINAL, CommandStatus
from rollouts.models import RolloutTarget
from rollouts.states import AbortOutcome, TargetStep

# Every state a target can show, in the order a person reads them.
TARGET_STATES: tuple[str, ...] = (
    TargetStep.PENDING,
    TargetStep.SKIPPED,
    *CommandStatus.values,
)
PRUNED = "pruned"  # a sent target whose command the retention prune removed


@dataclass(frozen=True)
class Counts:
    by_state: dict[str, int]

    def __getitem__(self, state: str) -> int:
        return self.by_state.get(state, 0)

    @property
    def total(self) -> int:
        return sum(self.by_state.values())

    @property
    def finished(self) -> int:
        """Sent targets whose command ended (skipped ones never count)."""
        return sum(self[s] for s in COMMAND_TERMINAL)

    @property
    def live(self) -> int:
        return sum(self[s] for s in COMMAND_LIVE)

    def outcome(self, outcome: str) -> int:
        if outcome == AbortOutcome.ANY:
            return self.finished - self[CommandStatus.APPLIED]
        return self[outcome]

    def as_dict(self) -> dict[str, int]:
        shown = {state: self[state] for state in TARGET_STATES}
        if self[PRUNED]:
            shown[PRUNED] = self[PRUNED]
        return shown


def rollouts_count(rollout_ids: Iterable[int]) -> dict[int, Counts]:
    """Counters of each rollout (one grouped query, whatever the number of rollouts)."""
    ids = list(rollout_ids)
    tallies: dict[int, Counter[str]] = {pk: Counter() for pk in ids}
    rows = (
        RolloutTarget.objects.filter(rollout_id__in=ids)
        .values_list("rollout_id", "step", "command__status")
        .annotate(n=Count("id"))
        .order_by()
    )
    for rollout_id, step, status, n in rows:
        state = step if step != TargetStep.SENT else (status or PRUNED)
        tallies[rollout_id][state] += n
    return {pk: Counts(dict(t)) for pk, t in tallies.items()}


def rollout_count(rollout_id: int) -> Counts:
    return rollouts_count([rollout_id])[rollout_id]


@dataclass(frozen=True)
class WaveCount:
    """One wave as its targets record it: when, how many it sent and how many it skipped."""

    wave: int
    at: datetime
    started: int
    skipped: int

    def __str__(self) -> str:
        return f"wave {self.wave}: {self.started} started, {self.skipped} skipped"


def rollout_waves(rollout_id: int) -> list[WaveCount]:
    """A rollout's waves, oldest first (one grouped query): a wave is no move of the rollout,
    its record is the targets it sent or skipped (``RolloutTarget.wave``)."""
    rows = (
        RolloutTarget.objects.filter(rollout_id=rollout_id, wave__isnull=False)
        .values_list("wave")
        .annotate(
            at=Min("updated_at"),
            started=Count("id", filter=Q(step=TargetStep.SENT)),
            skipped=Count("id", filter=Q(step=TargetStep.SKIPPED)),
        )
        .order_by("wave")
    )
    return [WaveCount(wave, at, started, skipped) for wave, at, started, skipped in rows]
