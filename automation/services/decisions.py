"""From a rule that fires to what it records: the one decision path of readings
(``automation.services.evaluate``) and schedule occurrences
(``automation.services.rule_schedules``).

A firing rule asks for each of its actions (the target endpoint, then each further action):
one candidate per (trigger, rule, endpoint). Per endpoint one candidate wins
(``automation.services.priority``); the others end ``discarded``/``lower_priority``. The
winner passes the gates, the manual hold, the live commands and the cool-down, like any
decision, and a command it needs is inserted set-based and replaces the endpoint's unsent
ones (latest decision wins). Called under the targets' lock (``targets_lock``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import NamedTuple

from automation.gates import command_gate_failure
from automation.keys import (
    event_command_idempotency_key,
    schedule_command_idempotency_key,
    target_value_key,
    watchdog_command_idempotency_key,
)
from automation.models import (
    AutomationEndpointEvent,
    AutomationRule,
    AutomationRuleExecution,
    CommandCooldown,
)
from automation.operators import values_equal
from automation.services.commands import CommandRow, command_fields
from automation.services.conditions import Reading
from automation.services.cooldown import CooldownKey, cooldown_holds
from automation.services.evaluate_sql import commands_pending_by_key, executions_read
from automation.services.priority import candidates_rank
from automation.services.rows import as_row
from automation.services.rule_cache import RuleSet, watchdog_holds
from automation.services.run_limits import NO_LIMIT, RunLimit
from automation.services.targets import (
    TargetState,
    commands_supersede_unsent,
    target_state_track,
)
from automation.services.transitions import CommandInsert, commands_insert
from automation.services.watchdog import WatchdogHold, watchdog_holds_active
from automation.states import CommandOrigin, ExecutionOutcome, ReasonCode
from common.json_types import JsonValue
from common.sql import insert_ignore_returning
from devices.models import DeviceInstanceEndpoint


@dataclass(frozen=True)
class Trigger:
    """What made a rule fire: a reading (``event``), or a scheduler row (``occurrence_id``):
    a schedule's occurrence or, with ``origin`` watchdog, a watchdog's silence; at ``at``
    (the reading's, the occurrence's or the silence's due time)."""

    at: datetime
    event: AutomationEndpointEvent | None = None
    occurrence_id: int | None = None
    origin: CommandOrigin = CommandOrigin.SCHEDULE  # of an occurrence's commands

    @property
    def order(self) -> tuple[datetime, int]:
        return (self.at, self.event.pk if self.event is not None else self.occurrence_id or 0)


@dataclass(frozen=True)
class Action:
    endpoint: DeviceInstanceEndpoint
    value: JsonValue
    limit: RunLimit = NO_LIMIT  # carried by the command it makes


def rule_actions(rule: AutomationRule) -> list[Action]:
    """The target endpoint's action, then the further ones (prefetched ``actions``)."""
    further = sorted(rule.actions.all(), key=lambda a: a.pk)
    return [
        Action(rule.target_endpoint, rule.target_value, RunLimit(rule.max_on_s, rule.max_on_value)),
        *(
            Action(a.target_endpoint, a.target_value, RunLimit(a.max_on_s, a.max_on_value))
            for a in further
        ),
    ]


# (event, occurrence, rule, target endpoint): one execution each.
Identity = tuple[int | None, int | None, int, int]


@dataclass(frozen=True)
class Decision:
    trigger: Trigger
    rule: AutomationRule
    action: Action
    outcome: ExecutionOutcome = ExecutionOutcome.COMMAND_CREATED
    reason: str = ""
    suppressed_by: int | None = None  # the failed command cooling, or the manual one holding
    won_by: Decision | None = None  # for lower_priority: the decision that won this batch
    won_by_execution: int | None = None  # ... or the live command's execution that did

    @property
    def identity(self) -> Identity:
        return (
            self.trigger.event.pk if self.trigger.event is not None else None,
            self.trigger.occurrence_id,
            self.rule.pk,
            self.action.endpoint.pk,
        )


@dataclass(frozen=True)
class ExecutionRow:
    """An ``AutomationRuleExecution`` as a batch inserts it (foreign keys by id)."""

    event: int | None
    occurrence: int | None
    rule: int
    target_endpoint: int
    outcome: ExecutionOutcome
    failure_reason: str
    suppressed_by: int | None
    won_by: int | None
    created_at: datetime


@dataclass(frozen=True)
class Context:
    """What the decisions of one batch read, loaded once under the targets' lock."""

    targets: Mapping[int, TargetState]
    cooldowns: dict[CooldownKey, CommandCooldown]
    holds: dict[int, int]  # endpoint → the manual command holding it
    now: datetime
    # endpoint → the silent watchdog holding it against rules of a lower priority
    watchdog_holds: dict[int, WatchdogHold] = field(default_factory=dict)


def decision_context(
    targets: Mapping[int, TargetState],
    now: datetime,
    *,
    rules: RuleSet | None = None,
    readings: dict[int, Reading] | None = None,
) -> Context:
    """The targets' states with their cool-downs and the manual holds still holding at
    ``now`` (read with the states), and the watchdogs holding them: from the cached
    ``rules`` and the ``readings`` of their trigger endpoints (``watchdog_trigger_ids``)
    when given, else read (two queries)."""
    if rules is not None and readings is not None:
        watchdogs = watchdog_holds(rules, targets, readings, now=now)
    else:
        watchdogs = watchdog_holds_active(targets, now=now)
    return Context(
        targets=targets,
        cooldowns={
            (pk, key): row
            for pk, target in targets.items()
            for key, row in target.cooldowns.items()
        },
        holds={
            pk: target.hold.command_id
            for pk, target in targets.items()
            if target.hold is not None and target.hold.until > now
        },
        now=now,
        watchdog_holds=watchdogs,
    )


class Decided(NamedTuple):
    """A batch's decisions and its targets as they leave them: the commands they create and
    the unsent ones they replace (``decisions_persist``)."""

    decisions: list[Decision]
    targets: dict[int, TargetState]


def candidates_decide(candidates: Sequence[Decision], context: Context) -> Decided:
    """Every candidate's outcome: one winner per endpoint decided in trigger order (each
    seeing what the earlier ones changed), the rest discarded naming the winner (or the
    higher-priority live command, ``automation.services.priority``)."""
    winners, losers = candidates_rank(candidates, context.targets)
    targets = dict(context.targets)
    decided: list[Decision] = []
    for candidate in sorted(winners, key=lambda d: d.trigger.order):
        pk = candidate.action.endpoint.pk
        decision = _decide(candidate, context, targets[pk])
        if decision.reason not in (ReasonCode.MANUAL_OVERRIDE, ReasonCode.WATCHDOG):
            # The manual (or the watchdog's) command stays the endpoint's latest decision.
            targets[pk] = target_state_track(targets[pk], decision.outcome, decision.action.value)
        decided.append(decision)
    # A loser names its winner by identity, whatever it decided.
    return Decided(decided + losers, targets)


def _decide(candidate: Decision, context: Context, target: TargetState) -> Decision:
    """Compared with the newest live command, then, when no command is on its way to the
    device, with the value the device last reported (telemetry or a state report): commands
    never sent are replaced by this decision (latest wins), so they do not count. A command
    already sent may still fail, so its value is asked for again rather than assumed."""
    rule, endpoint, value = candidate.rule, candidate.action.endpoint, candidate.action.value

    def ends(outcome: ExecutionOutcome, reason: str = "", by: int | None = None) -> Decision:
        return replace(candidate, outcome=outcome, reason=reason, suppressed_by=by)

    blocked = command_gate_failure(rule, endpoint, value=value)
    if blocked is not None:
        return ends(ExecutionOutcome.BLOCKED, blocked)
    held_by = context.holds.get(endpoint.pk)
    if held_by is not None:
        return ends(ExecutionOutcome.SUPPRESSED, ReasonCode.MANUAL_OVERRIDE, held_by)
    watchdog = context.watchdog_holds.get(endpoint.pk)
    if watchdog is not None and watchdog.rule_id != rule.pk and rule.priority < watchdog.priority:
        return ends(ExecutionOutcome.SUPPRESSED, ReasonCode.WATCHDOG)
    has_live, live_value = target.newest_live_value()
    if has_live and values_equal(live_value, value):
        return ends(ExecutionOutcome.ALREADY_PENDING)
    if not target.has_sent and target.known_to_hold(value):
        # Only commands never sent are live (or none): the device holds what it reported.
        return ends(ExecutionOutcome.ALREADY_IN_STATE)
    cooling = context.cooldowns.get((endpoint.pk, target_value_key(value)))
    if cooling is not None and cooldown_holds(
        cooling,
        rule=rule,
        reported=target.reported,
        endpoint_edited_at=target.edited_at,
        now=context.now,
    ):
        return ends(ExecutionOutcome.SUPPRESSED, ReasonCode.COOLDOWN, cooling.command_id)
    return ends(ExecutionOutcome.COMMAND_CREATED)


def decisions_persist(
    decisions: Sequence[Decision], targets: Mapping[int, TargetState], now: datetime
) -> list[int]:
    """Insert the executions (winners first, so the discarded ones can name theirs) and the
    commands set-based, replace the unsent commands the decisions overruled; the ids of the
    commands awaiting dispatch."""
    if not decisions:
        return []
    first = [d for d in decisions if d.won_by is None]
    inserted = insert_ignore_returning(
        AutomationRuleExecution,
        [as_row(_execution(d, None, now)) for d in first],
        returning=("event", "occurrence", "rule", "target_endpoint", "id"),
    )
    if len(inserted) == len(first):  # no conflict: the insert named every execution
        ids: dict[Identity, int] = {(e, o, r, t): pk for e, o, r, t, pk in inserted}
    else:
        ids = _execution_ids(decisions)
    rest = [d for d in decisions if d.won_by is not None]
    insert_ignore_returning(
        AutomationRuleExecution,
        [
            as_row(_execution(d, ids.get(d.won_by.identity) if d.won_by else None, now))
            for d in rest
        ],
    )
    wanted = [d for d in first if d.outcome == ExecutionOutcome.COMMAND_CREATED]
    # Insert in trigger order, so on each endpoint the newest decision's command has the
    # highest id (the one that supersedes, and the one the device ends with).
    wanted.sort(key=lambda d: d.trigger.order)
    commands = [_command_row(d, ids[d.identity], now) for d in wanted if d.identity in ids]
    made = commands_insert([CommandInsert(i) for i in commands], now=now)
    if len(made) == len(commands):  # no conflict: every one is new, so pending dispatch
        endpoint_of = {i.columns.idempotency_key: i.target_device_endpoint for i in commands}
        created = sorted((pk, endpoint_of[key]) for key, pk in made.items())
    else:
        created = commands_pending_by_key([i.columns.idempotency_key for i in commands])
    return commands_supersede_unsent(targets, created, now)


def _execution(d: Decision, won_by: int | None, now: datetime) -> ExecutionRow:
    return ExecutionRow(
        event=d.trigger.event.pk if d.trigger.event is not None else None,
        occurrence=d.trigger.occurrence_id,
        rule=d.rule.pk,
        target_endpoint=d.action.endpoint.pk,
        outcome=d.outcome,
        failure_reason=d.reason,
        suppressed_by=d.suppressed_by,
        won_by=won_by if won_by is not None else d.won_by_execution,
        created_at=now,
    )


def _execution_ids(decisions: Sequence[Decision]) -> dict[Identity, int]:
    """(event, occurrence, rule, endpoint) → execution id, for the batch's decisions that
    ended as decided here (a concurrent worker may have recorded another outcome first)."""
    rows = executions_read(
        event_ids={d.trigger.event.pk for d in decisions if d.trigger.event is not None},
        occurrence_ids={d.trigger.occurrence_id for d in decisions if d.trigger.occurrence_id},
        rule_ids={d.rule.pk for d in decisions},
    )
    outcome_of = {d.identity: d.outcome for d in decisions if d.won_by is None}
    return {
        (event, occurrence, rule, endpoint): pk
        for event, occurrence, rule, endpoint, pk, outcome in rows
        if outcome_of.get((event, occurrence, rule, endpoint), outcome) == outcome
    }


def _command_row(d: Decision, execution_id: int, now: datetime) -> CommandRow:
    rule, target, value = d.rule, d.action.endpoint, d.action.value
    if d.trigger.event is not None:
        origin = CommandOrigin.RULE
        key = event_command_idempotency_key(
            rule_id=rule.pk,
            target_endpoint_id=target.pk,
            target_value=value,
            event_id=d.trigger.event.pk,
        )
    elif d.trigger.origin == CommandOrigin.WATCHDOG:
        origin = CommandOrigin.WATCHDOG
        key = watchdog_command_idempotency_key(
            rule_id=rule.pk,
            target_endpoint_id=target.pk,
            target_value=value,
            occurrence_id=d.trigger.occurrence_id or 0,
        )
    else:
        origin = CommandOrigin.SCHEDULE
        key = schedule_command_idempotency_key(
            rule_id=rule.pk,
            target_endpoint_id=target.pk,
            target_value=value,
            occurrence_id=d.trigger.occurrence_id or 0,
        )
    return CommandRow(
        origin=origin,
        rule_execution=execution_id,
        rule=rule.pk,
        target_device=target.device_id,
        target_device_endpoint=target.pk,
        columns=command_fields(target, value, key=key, now=now, limit=d.action.limit),
    )
