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
from dataclasses import dataclass, field
from datetime import datetime

from django.db import connection
from django.db.models import OuterRef, Subquery

from automation.models import DeviceCommand
from automation.operators import values_equal
from automation.services.conditions import Reading
from automation.services.transitions import GuardedTransition, Transition, commands_transition
from automation.states import COMMAND_LIVE, CommandStatus, ExecutionOutcome, ReasonCode
from common.hot_sql import hot_rows
from common.json_types import JsonValue
from devices.models import DeviceInstanceEndpoint

# First key of the advisory locks that serialise evaluation per target endpoint.
TARGET_LOCK_NAMESPACE = 0x46410001
# Ends of a command that was sent and never answered for: the device may have applied it.
COMMAND_ENDED_UNSEEN = (CommandStatus.EXPIRED, CommandStatus.UNCERTAIN)


@dataclass
class TargetState:
    """What one target endpoint will end with, as far as its live commands tell: kept up to
    date while a batch is decided, so two rules on one target in one batch agree."""

    live: list[tuple[int, JsonValue]] = field(default_factory=list)  # (id, value), oldest first
    # (priority, command, execution) of the live commands a rule, a schedule or a rollout
    # (no execution) decided: a lower-priority rule's decision does not replace them
    # (``automation.services.priority``).
    ranked: list[tuple[int, int, int | None]] = field(default_factory=list)
    unsent: list[int] = field(default_factory=list)  # live commands never sent: replaceable
    has_sent: bool = False  # a live command already claimed or sent (cannot be recalled)
    # What the device last reported, read after the live commands (see target_states_load).
    reported: JsonValue = None
    # A command sent after that report ended without the device's word (expired with its
    # retries spent, or uncertain): the device may hold its value or the one reported.
    reported_unsure: bool = False
    edited_at: datetime | None = None  # the endpoint's last configuration edit
    replaced: list[int] = field(default_factory=list)  # unsent commands a decision replaced
    creates: bool = False  # the last decision creates a command

    def newest_live_value(self) -> tuple[bool, JsonValue]:
        return (True, self.live[-1][1]) if self.live else (False, None)

    def known_to_hold(self, value: JsonValue) -> bool:
        """The device said it holds ``value`` and nothing sent since may have changed it
        unseen: only then may a decision skip a command for it. A relay whose ack, state
        report and telemetry were all lost has applied a command nobody saw; believing its
        older report would leave it where that command put it."""
        return not self.reported_unsure and values_equal(self.reported, value)


def target_states_load(endpoint_ids: Iterable[int]) -> dict[int, TargetState]:
    return targets_and_readings_load(endpoint_ids, ())[0]


def targets_and_readings_load(
    endpoint_ids: Iterable[int],
    reading_ids: Iterable[int],
    *,
    priorities: Mapping[int, int] | None = None,
) -> tuple[dict[int, TargetState], dict[int, Reading]]:
    """Live commands of every target endpoint, oldest first, then what each endpoint last
    reported (two queries, under the targets' lock): commands on one endpoint go out in
    creation order, so the newest live one is what the device ends with.

    The order matters: a command's evidence is stored (and the endpoint's value updated)
    before the command turns terminal, so a command read as ended is already in the value
    read next; read the other way round, a value from before a command applied could be
    paired with that command already gone, and the decision would skip a needed command.

    ``priorities`` (rule id → priority, every rule's: the rule cache's) spares the live
    commands' read a join with the rules."""
    targets: dict[int, TargetState] = {pk: TargetState() for pk in endpoint_ids}
    rows = (
        DeviceCommand.objects.filter(
            target_device_endpoint_id__in=set(targets), status__in=COMMAND_LIVE
        )
        .order_by("pk")
        .values_list(
            "pk",
            "target_device_endpoint_id",
            "target_value",
            "status",
            "attempt_count",
            "rule_id" if priorities is not None else "rule__priority",
            "rule_execution_id",
            "rollout_target__rollout__priority",  # by name: the rollouts app sits above
        )
    )
    for pk, endpoint_id, value, status, attempts, rule, execution_id, rollout in rows:
        priority = rule if priorities is None or rule is None else priorities.get(rule, 0)
        target = targets[endpoint_id]
        target.live.append((pk, value))
        if priority is not None and execution_id is not None:
            target.ranked.append((priority, pk, execution_id))
        elif rollout is not None:
            target.ranked.append((rollout, pk, None))
        if status == CommandStatus.PENDING_DISPATCH and attempts == 0:
            target.unsent.append(pk)
        else:
            target.has_sent = True
    # One read also gives the last reading of each endpoint in ``reading_ids`` (a rule's
    # conditions), in the same round trip.
    readings: dict[int, Reading] = {}
    wanted = set(reading_ids)
    # The last sending of a command that ended without the device's word, in the same read.
    unsure = DeviceCommand.objects.filter(
        target_device_endpoint_id=OuterRef("pk"),
        status__in=COMMAND_ENDED_UNSEEN,
        dispatched_at__isnull=False,
    ).order_by("-dispatched_at")
    reported = (
        DeviceInstanceEndpoint.objects.filter(pk__in=set(targets) | wanted)
        .annotate(unsure_since=Subquery(unsure.values("dispatched_at")[:1]))
        .values_list("pk", "last_value", "updated_at", "last_value_at", "unsure_since")
    )
    for pk, value, edited_at, value_at, unsure_since in reported:
        if pk in targets:
            target = targets[pk]
            target.reported, target.edited_at = value, edited_at
            target.reported_unsure = unsure_since is not None and (
                value_at is None or value_at < unsure_since
            )
        if pk in wanted:
            readings[pk] = Reading(value, value_at)
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


def target_state_track(target: TargetState, outcome: ExecutionOutcome, value: JsonValue) -> None:
    """Update the target's picture with a decision, before the next one is made. Any decision
    that does not leave the newest live command in place replaces the unsent ones."""
    if outcome == ExecutionOutcome.BLOCKED:
        return
    has_live, live_value = target.newest_live_value()
    if has_live and values_equal(live_value, value):
        return
    replaced = set(target.unsent)
    target.replaced.extend(pk for pk in target.unsent if pk)
    target.live = [(pk, v) for pk, v in target.live if pk not in replaced]
    target.unsent = []
    target.creates = outcome == ExecutionOutcome.INTENT_CREATED
    if target.creates:  # its id is known after the insert: 0 stands for it until then
        target.live.append((0, value))
        target.unsent.append(0)


def commands_supersede_unsent(
    targets: dict[int, TargetState], created: list[tuple[int, int]], now: datetime
) -> list[int]:
    """Expire the unsent commands the newest decision on each endpoint overruled: the device
    gets the latest decision, not a queue of outdated ones. A command already claimed or sent
    keeps its course (it cannot be recalled); a new one waits behind it. Returns the intents
    left to dispatch."""
    created_on: dict[int, list[int]] = defaultdict(list)
    for pk, endpoint_id in created:
        created_on[endpoint_id].append(pk)
    keep: list[int] = []
    replaced_by: dict[int, str] = {}
    for endpoint_id, target in targets.items():
        mine = created_on.get(endpoint_id, [])
        kept = mine[-1] if mine and target.creates else None
        reason = f"replaced by command {kept}" if kept else "the newest decision needs no command"
        for pk in [*target.replaced, *mine]:
            if pk != kept:
                replaced_by[pk] = reason
        if kept is not None:
            keep.append(kept)
    stale = DeviceCommand.objects.filter(
        pk__in=list(replaced_by), status=CommandStatus.PENDING_DISPATCH, attempt_count=0
    )
    commands_transition(
        [
            GuardedTransition(
                intent,
                [Transition(CommandStatus.EXPIRED, ReasonCode.SUPERSEDED, replaced_by[intent.pk])],
            )
            for intent in stale
        ],
        now=now,
    )
    return sorted(keep)
