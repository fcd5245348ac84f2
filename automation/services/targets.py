"""Latest decision wins, per target endpoint: what the device will end with, and which
unsent commands a newer decision replaces.

Evaluation holds an advisory lock per target endpoint (PostgreSQL; SQLite serialises every
writer) while it reads the live commands, decides and supersedes, so two workers never
decide from the same picture. A command already claimed or sent keeps its course (it cannot
be recalled); a new one waits behind it.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import NamedTuple

from django.db import connection

from automation.models import CommandCooldown
from automation.operators import values_equal
from automation.services.conditions import Reading
from automation.services.evaluate_sql import (
    ManualHold,
    commands_live_read,
    commands_unsent_read,
    endpoints_reported_read,
)
from automation.services.transitions import GuardedTransition, Transition, guarded_transitions_apply
from automation.states import CommandStatus, ExecutionOutcome, ReasonCode
from common.hot_sql import hot_rows
from common.json_types import JsonValue

# First key of the advisory locks that serialise evaluation per target endpoint.
TARGET_LOCK_NAMESPACE = 0x46410001


class Live(NamedTuple):
    """A live command on the target: what the device ends with if it is the newest."""

    command: int
    value: JsonValue


class Ranked(NamedTuple):
    """A live command a rule, a schedule or a rollout decided, by the priority it holds the
    target with (``automation.services.priority``); a rollout's has no execution."""

    priority: int
    command: int
    execution: int | None


class NewCommand(NamedTuple):
    """The command a batch's last decision on a target creates: its id is known only after
    the insert, its value already."""

    value: JsonValue


@dataclass(frozen=True)
class TargetState:
    """What one target endpoint will end with, as far as its live commands tell, and what may
    hold it against a decision: an operator's manual hold, the cool-downs of values that
    failed on it. Read once per batch; each decision yields the next state
    (``target_state_track``), so two rules on one target in one batch agree."""

    live: tuple[Live, ...] = ()  # oldest first
    # The live commands a rule, a schedule or a rollout decided: a lower-priority rule's
    # decision does not replace them.
    ranked: tuple[Ranked, ...] = ()
    unsent: tuple[int, ...] = ()  # live commands never sent: replaceable
    has_sent: bool = False  # a live command already claimed or sent (cannot be recalled)
    # What the device last reported, read after the live commands (see target_states_load).
    reported: JsonValue = None
    # A command sent after that report ended without the device's word (expired with its
    # retries spent, or uncertain): the device may hold its value or the one reported.
    reported_unsure: bool = False
    edited_at: datetime | None = None  # the endpoint's last configuration edit
    hold: ManualHold | None = None  # an operator's, not cancelled (it may have run out)
    cooldowns: Mapping[str, CommandCooldown] = field(default_factory=dict)  # by value key
    replaced: tuple[int, ...] = ()  # unsent commands this batch's decisions replaced
    creates: NewCommand | None = None  # the command the last decision creates

    def newest_live_value(self) -> tuple[bool, JsonValue]:
        if self.creates is not None:
            return True, self.creates.value
        return (True, self.live[-1].value) if self.live else (False, None)

    def known_to_hold(self, value: JsonValue) -> bool:
        """The device said it holds ``value`` and nothing sent since may have changed it
        unseen: only then may a decision skip a command for it. A relay whose ack, state
        report and telemetry were all lost has applied a command nobody saw; believing its
        older report would leave it where that command put it."""
        return not self.reported_unsure and values_equal(self.reported, value)

    def superseded(self, creates: NewCommand | None) -> TargetState:
        """This state after a decision that does not keep the newest live command: the unsent
        commands are replaced, by ``creates`` when the decision makes one."""
        unsent = set(self.unsent)
        return replace(
            self,
            live=tuple(row for row in self.live if row.command not in unsent),
            unsent=(),
            replaced=self.replaced + self.unsent,
            creates=creates,
        )


def target_states_load(endpoint_ids: Iterable[int]) -> dict[int, TargetState]:
    return targets_and_readings_load(endpoint_ids, ())[0]


def targets_and_readings_load(
    endpoint_ids: Iterable[int],
    reading_ids: Iterable[int],
    *,
    priorities: Mapping[int, int] | None = None,
) -> tuple[dict[int, TargetState], dict[int, Reading]]:
    """Live commands of every target endpoint, oldest first, then what each endpoint last
    reported, with its manual hold and its cool-downs (two statements, under the targets'
    lock): commands on one endpoint go out in creation order, so the newest live one is what
    the device ends with.

    The order matters: a command's evidence is stored (and the endpoint's value updated)
    before the command turns terminal, so a command read as ended is already in the value
    read next; read the other way round, a value from before a command applied could be
    paired with that command already gone, and the decision would skip a needed command.

    ``priorities`` (rule id → priority, every rule's: the rule cache's) spares the live
    commands' read a join with the rules."""
    ids = list(endpoint_ids)
    live: dict[int, list[Live]] = {pk: [] for pk in ids}
    ranked: dict[int, list[Ranked]] = {pk: [] for pk in ids}
    unsent: dict[int, list[int]] = {pk: [] for pk in ids}
    has_sent: set[int] = set()
    for command in commands_live_read(ids, rule_priority=priorities is None):
        if priorities is None:
            priority = command.rule_priority
        else:
            rule = command.rule_id
            priority = None if rule is None else priorities.get(rule, 0)
        endpoint = command.endpoint_id
        live[endpoint].append(Live(command.id, command.value))
        if priority is not None and command.execution_id is not None:
            ranked[endpoint].append(Ranked(priority, command.id, command.execution_id))
        elif command.rollout_priority is not None:
            ranked[endpoint].append(Ranked(command.rollout_priority, command.id, None))
        if command.status == CommandStatus.PENDING_DISPATCH and command.attempt_count == 0:
            unsent[endpoint].append(command.id)
        else:
            has_sent.add(endpoint)
    targets = {
        pk: TargetState(tuple(live[pk]), tuple(ranked[pk]), tuple(unsent[pk]), pk in has_sent)
        for pk in ids
    }
    # One read also gives the last reading of each endpoint in ``reading_ids`` (a rule's
    # conditions), in the same round trip.
    readings: dict[int, Reading] = {}
    wanted = set(reading_ids)
    for reported in endpoints_reported_read(set(targets) | wanted):
        if reported.id in targets:
            unsure_since = reported.unsure_since
            targets[reported.id] = replace(
                targets[reported.id],
                reported=reported.value,
                edited_at=reported.edited_at,
                reported_unsure=unsure_since is not None
                and (reported.value_at is None or reported.value_at < unsure_since),
                hold=reported.hold,
                cooldowns={c.value_key: c for c in reported.cooldowns},
            )
        if reported.id in wanted:
            readings[reported.id] = Reading(reported.value, reported.value_at)
    return targets, readings


def targets_lock(endpoint_ids: Iterable[int]) -> None:
    """Serialise evaluation per target endpoint until commit (PostgreSQL advisory locks, in
    id order so two workers never deadlock), so deciding from the newest live command and
    superseding older ones cannot interleave; the dispatcher's first claim of a command takes
    it too, so a command a decision replaced is never claimed in between. SQLite serialises
    every writer already."""
    ids = sorted(set(endpoint_ids))
    if not ids or connection.vendor != "postgresql":
        return
    hot_rows(  # a hot statement: the first claim of every command takes it too
        "SELECT count(pg_advisory_xact_lock(%s::int, (x %% 2147483647)::int)) "
        "FROM (SELECT x FROM unnest(%s::bigint[]) AS x ORDER BY x) AS ordered",
        [TARGET_LOCK_NAMESPACE, ids],
    )


def target_state_track(
    target: TargetState, outcome: ExecutionOutcome, value: JsonValue
) -> TargetState:
    """The target's picture after a decision, for the next one. Any decision that does not
    leave the newest live command in place replaces the unsent ones."""
    if outcome == ExecutionOutcome.BLOCKED:
        return target
    has_live, live_value = target.newest_live_value()
    if has_live and values_equal(live_value, value):
        return target
    created = outcome == ExecutionOutcome.COMMAND_CREATED
    return target.superseded(NewCommand(value) if created else None)


def commands_supersede_unsent(
    targets: Mapping[int, TargetState], created: list[tuple[int, int]], now: datetime
) -> list[int]:
    """Expire the unsent commands the newest decision on each endpoint overruled: the device
    gets the latest decision, not a queue of outdated ones. A command already claimed or sent
    keeps its course (it cannot be recalled); a new one waits behind it. Returns the commands
    left to dispatch."""
    created_on: dict[int, list[int]] = defaultdict(list)
    for pk, endpoint_id in created:
        created_on[endpoint_id].append(pk)
    keep: list[int] = []
    replaced_by: dict[int, str] = {}
    for endpoint_id, target in targets.items():
        mine = created_on.get(endpoint_id, [])
        kept = mine[-1] if mine and target.creates is not None else None
        reason = f"replaced by command {kept}" if kept else "the newest decision needs no command"
        for pk in [*target.replaced, *mine]:
            if pk != kept:
                replaced_by[pk] = reason
        if kept is not None:
            keep.append(kept)
    stale = commands_unsent_read(replaced_by)
    guarded_transitions_apply(
        [
            GuardedTransition(
                command,
                [Transition(CommandStatus.EXPIRED, ReasonCode.SUPERSEDED, replaced_by[command.pk])],
            )
            for command in stale
        ],
        now=now,
    )
    return sorted(keep)
