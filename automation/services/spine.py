"""The execution core's stage order, in one function (``next_stages``).

A reading crosses three Celery tasks at most: the bridge commits telemetry, its endpoint
events and device replies itself (``automation.services.edge``), then evaluation decides
commands, dispatch publishes them, and reconciliation decides on the evidence: the device's
ack, its state report and the telemetry that proves the value all go to one reconcile task.
Each stage says what it committed (``Committed``); this module turns that into the next
stages' work and hands it on through ``common.handoff``, after the commit, so a worker never
reads a row that is not committed yet. A hand-off that is lost only delays the work: beat's
sweeps find every pending piece in SQL.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from django.conf import settings

from automation.services.rule_cache import metric_endpoints
from common.handoff import after_commit, enqueue
from common.json_types import JsonValue
from config.task_names import (
    COMMANDS_DISPATCH,
    COMMANDS_RECONCILE,
    EVENTS_EVALUATE,
    METRICS_TOUCHED,
)

# Dispatch takes at most this many commands per task: one publish batch and one guarded
# update of the batch, small enough that a retry of the task redoes little.
DISPATCH_BATCH_SIZE = 50


@dataclass(frozen=True)
class Committed:
    """What a stage committed that another stage acts on, by id."""

    events: Sequence[int] = ()  # new endpoint events: evaluation
    commands: Sequence[int] = ()  # new pending commands: dispatch
    commands_due: Sequence[int] = ()  # commands a sweep found due: dispatch, the database decides
    evidence: Sequence[int] = ()  # commands with new evidence or a passed deadline: reconcile
    endpoints: Sequence[int] = ()  # endpoints with new readings: threshold reminders


@dataclass(frozen=True)
class Hop:
    """One task of a next stage: its registered name, its ids, and its options."""

    task: str
    ids: list[int]
    options: tuple[tuple[str, JsonValue], ...] = ()


def next_stages(committed: Committed) -> list[Hop]:
    """The stage order: event → evaluate → dispatch → reconcile, and readings of watched
    endpoints → threshold reminders. Ids are cut into each stage's batch size."""
    hops = _cut(EVENTS_EVALUATE, committed.events, settings.EVALUATE_BATCH_SIZE)
    hops += _cut(COMMANDS_DISPATCH, committed.commands, DISPATCH_BATCH_SIZE)
    # The sweep's dispatch ignores the cache's inflight markers: the database decides.
    hops += _cut(
        COMMANDS_DISPATCH, committed.commands_due, DISPATCH_BATCH_SIZE, (("trust_cache", False),)
    )
    hops += _cut(COMMANDS_RECONCILE, committed.evidence, DISPATCH_BATCH_SIZE)
    if committed.endpoints:
        # Which endpoints are watched comes from the configuration cache: one read of its
        # version while nothing changed. A source made after that read is caught up by the
        # reminders' reconciliation pass.
        watched = sorted(metric_endpoints().intersection(committed.endpoints))
        hops += _cut(METRICS_TOUCHED, watched, max(len(watched), 1))
    return hops


def _cut(
    task: str, ids: Sequence[int], size: int, options: tuple[tuple[str, JsonValue], ...] = ()
) -> list[Hop]:
    unique = list(dict.fromkeys(ids))
    return [Hop(task, unique[i : i + size], options) for i in range(0, len(unique), size)]


Send = Callable[[Hop], None]


def _enqueue(hop: Hop) -> None:
    enqueue(hop.task, hop.ids, **dict(hop.options))


def hand_on(committed: Committed, send: Send = _enqueue) -> None:
    """Queue the next stages' work now: the caller has committed (or holds no transaction).
    ``send`` is the bridge's nudger there, which never waits on the Celery broker."""
    for hop in next_stages(committed):
        send(hop)


def hand_on_commit(committed: Committed) -> None:
    """Queue the next stages' work once the current transaction commits (at once outside
    one); a failed send is logged by ``common.handoff`` and left to the sweeps."""
    if any(
        (
            committed.events,
            committed.commands,
            committed.commands_due,
            committed.evidence,
            committed.endpoints,
        )
    ):
        after_commit(lambda: hand_on(committed))
