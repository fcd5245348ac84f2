"""Rules that drive each other in a loop are refused: a rule reads its condition endpoints
(trigger and further conditions) and writes its action endpoints (target and further actions),
so each rule draws an edge from every endpoint it reads to every endpoint it writes. A
candidate that closes a cycle over its farm's active rules (acting on its own condition
endpoint included) would switch devices back and forth forever. Rules of other farms never
count; the farm's rules are read once with their conditions and actions (three queries)."""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from django.db.models import Prefetch

from automation.models import AutomationRule, AutomationRuleAction, AutomationRuleCondition


@dataclass(frozen=True)
class RuleEdges:
    """One rule's reads and writes, by endpoint id."""

    name: str
    reads: tuple[int, ...]
    writes: tuple[int, ...]


def _farm_rules(farm_id: int, *, excluding: int | None) -> list[RuleEdges]:
    rows = AutomationRule.objects.filter(farm_id=farm_id, is_active=True)
    if excluding is not None:
        rows = rows.exclude(pk=excluding)
    rows = (
        rows.only("pk", "name", "trigger_endpoint_id", "target_endpoint_id")
        .prefetch_related(
            Prefetch("conditions", AutomationRuleCondition.objects.only("rule_id", "endpoint_id")),
            Prefetch("actions", AutomationRuleAction.objects.only("rule_id", "target_endpoint_id")),
        )
        .order_by("pk")
    )
    return [
        RuleEdges(
            name=rule.name,
            reads=tuple([rule.trigger_endpoint_id] if rule.trigger_endpoint_id is not None else [])
            + tuple(c.endpoint_id for c in rule.conditions.all()),
            writes=(rule.target_endpoint_id, *(a.target_endpoint_id for a in rule.actions.all())),
        )
        for rule in rows
    ]


def _path(rules: Sequence[RuleEdges], start: int, goal: int) -> list[RuleEdges] | None:
    """The rules along a shortest chain of reads->writes from endpoint ``start`` to ``goal``
    (empty when they are the same endpoint), or None when there is none."""
    if start == goal:
        return []
    came_from: dict[int, tuple[int, RuleEdges]] = {}
    queue = deque([start])
    while queue:
        endpoint = queue.popleft()
        for rule in rules:
            if endpoint not in rule.reads:
                continue
            for written in rule.writes:
                if written in came_from or written == start:
                    continue
                came_from[written] = (endpoint, rule)
                if written == goal:
                    chain: list[RuleEdges] = []
                    while written != start:
                        written, via = came_from[written]
                        chain.append(via)
                    return chain[::-1]
                queue.append(written)
    return None


def rule_cycle(
    *,
    farm_id: int,
    rule_id: int | None,
    name: str,
    reads: Iterable[int],
    writes: Iterable[int],
) -> tuple[int, list[str]] | None:
    """The first written endpoint of the candidate through which it closes a cycle, with the
    names of the rules around it (the candidate first), or None."""
    candidate = RuleEdges(name=name, reads=tuple(reads), writes=tuple(writes))
    rules = [candidate, *_farm_rules(farm_id, excluding=rule_id)]
    for written in candidate.writes:
        for read in candidate.reads:
            chain = _path(rules, written, read)
            if chain is not None:
                return written, [candidate.name, *(rule.name for rule in chain)]
    return None
