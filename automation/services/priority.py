"""Several rules on one endpoint: which decision acts.

Decisions for the same endpoint at the same time (one evaluation batch, or one schedule
occurrence) resolve to the highest ``AutomationRule.priority``, then to the newest trigger
(reading or occurrence); the others end ``discarded``/``lower_priority`` naming the winner's
execution (``won_by``). One rule deciding an endpoint twice in a batch (a message reporting
its trigger and a condition's endpoint evaluates it once per reading) keeps the newest, the
other ends ``discarded``/``newer_reading`` naming it: the rule lost to no other.

A live command of a rule with a strictly higher priority also holds the endpoint: a
lower-priority decision while it is on its way ends ``discarded``/``lower_priority``, naming
that command's execution (a rollout's command, which has none, is named as ``suppressed_by``);
an equal priority leaves the latest decision winning. A rollout ranks with its ``priority``.
An operator's manual command outranks every rule through its hold
(``automation.services.manual``).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

from automation.services.targets import TargetState
from automation.states import ExecutionOutcome, ReasonCode

if TYPE_CHECKING:
    from automation.services.decisions import Decision


def candidates_rank(
    candidates: Sequence[Decision], targets: Mapping[int, TargetState]
) -> tuple[list[Decision], list[Decision]]:
    """(winners, losers): one winner per endpoint, or none where a higher-priority live
    command holds it; every loser already ``discarded``/``lower_priority``."""
    by_endpoint: dict[int, list[Decision]] = defaultdict(list)
    for candidate in candidates:
        by_endpoint[candidate.action.endpoint.pk].append(candidate)
    winners: list[Decision] = []
    losers: list[Decision] = []
    for endpoint_id, group in by_endpoint.items():
        group.sort(key=lambda d: (d.rule.priority, d.trigger.order), reverse=True)
        best = group[0]
        live = _live_outranking(targets[endpoint_id], best.rule.priority)
        if live is not None:
            command, execution = live
            by = None if execution else command
            losers.extend(_discarded(d, won_by_execution=execution, by_command=by) for d in group)
            continue
        winners.append(best)
        losers.extend(_discarded(d, won_by=best, reason=_reason(d, best)) for d in group[1:])
    return winners, losers


def _live_outranking(target: TargetState, priority: int) -> tuple[int, int | None] | None:
    """(command, its execution or None for a rollout's) of the highest-priority (then newest)
    live command that outranks ``priority``, if any."""
    above = [ranked for ranked in target.ranked if ranked.priority > priority]
    if not above:
        return None
    top = max(above, key=lambda ranked: (ranked.priority, ranked.command))
    return top.command, top.execution


def _reason(loser: Decision, winner: Decision) -> ReasonCode:
    same_rule = loser.rule.pk == winner.rule.pk
    return ReasonCode.NEWER_READING if same_rule else ReasonCode.LOWER_PRIORITY


def _discarded(
    candidate: Decision,
    *,
    won_by: Decision | None = None,
    won_by_execution: int | None = None,
    by_command: int | None = None,
    reason: ReasonCode = ReasonCode.LOWER_PRIORITY,
) -> Decision:
    """``by_command``: a live rollout command (it has no execution to name) outranked it."""
    return replace(
        candidate,
        outcome=ExecutionOutcome.DISCARDED,
        reason=reason,
        won_by=won_by,
        won_by_execution=won_by_execution,
        suppressed_by=by_command,
    )
