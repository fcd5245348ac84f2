"""Command transitions, the one primitive of every stage and of the row-by-row paths
(``command_transition`` is a batch of one): moves of the commands' ledger (``COMMANDS``,
``common.ledger``). Each row moves only from the (status, version) it was read with, every
transition it takes gets its audit row in the same statement (PostgreSQL) or transaction
(SQLite), and a command that ends frees its endpoint for the next one. A batch costs one
statement per distinct set of changed columns (two or three kinds in practice; on SQLite one
INSERT of audit rows more) and, after commit, one query for the commands waiting behind the
freed endpoints, however many rows it carries; every one hand-written (``common.ledger``,
``automation.services.dispatch_sql``), none through the ORM.

Two ends imply more, in the same transaction, and cost nothing when no row of the batch
needs them: a command that applies with a run-time limit ensures its due work
(``automation.services.run_limits``), and one that ends failed, expired or uncertain is
handed to the farm's alarm policy (one read of the devices' farms for both)."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, NamedTuple, TypedDict

from django.db import transaction

from alarms.services import CommandEnded, command_alarms_raise
from automation import coordination
from automation.models import CommandTransition, DeviceCommand
from automation.services.dispatch_sql import device_farms, endpoints_next_waiting
from automation.services.rows import as_row
from automation.services.run_limits import run_limits_ensure
from automation.services.spine import Committed, hand_on
from automation.states import COMMAND_TERMINAL, COMMAND_TRANSITIONS, CommandStatus, ReasonCode
from common.handoff import after_commit
from common.json_types import JsonValue
from common.ledger import Ledger, Move, Step, ledger_created, ledger_move, ledger_row_follow
from common.sql import insert_ignore_returning
from config.metrics import metrics_transitions_recorded

if TYPE_CHECKING:
    from automation.services.commands import CommandRow

logger = logging.getLogger(__name__)

# The ends that may raise an alarm (the farm's policy says which do), but for those the system
# or a person chose: a command replaced before it was sent, one of a stopped rollout (that
# rollout raises its own), one support marked failed.
ALARMED_ENDS = frozenset({CommandStatus.FAILED, CommandStatus.EXPIRED, CommandStatus.UNCERTAIN})
QUIET_ENDS = frozenset({ReasonCode.SUPERSEDED, ReasonCode.ROLLOUT_STOPPED, ReasonCode.MANUAL})
DETAIL_MAX_CHARS = 500

# The moves the commands' ledger makes: the state machine's edges (``automation.states``),
# and one in place, retrying -> retrying: a command already waiting to be retried that fails
# to publish again for another reason moves its ``status_reason`` and its next attempt, and
# that step is audited once (``automation.services.commands``).
COMMAND_EDGES: dict[str, frozenset[str]] = {
    **COMMAND_TRANSITIONS,
    CommandStatus.RETRYING: COMMAND_TRANSITIONS[CommandStatus.RETRYING] | {CommandStatus.RETRYING},
}
# The commands' ledger (``common.ledger``): version and ``updated_at`` follow every move, a
# move may take several steps (a reply that proves a command applied acknowledges it first),
# and each audit row copies the attempt the move left on the row. A move off its edges is
# not made (as ``command_transition`` never asked for one).
COMMANDS = Ledger(
    DeviceCommand,
    touched="updated_at",
    audit=CommandTransition,
    audit_row="command",
    copies={"attempt": "attempt_count"},
    edges=COMMAND_EDGES,
)


class CommandFields(TypedDict, total=False):
    """The columns a transition sets beside its status: the one list of them, so a typo or a
    value of the wrong type is a type error, not a silent extra column."""

    acknowledged_at: datetime | None
    applied_at: datetime
    attempt_count: int
    deadline_at: datetime
    dispatched_at: datetime
    first_dispatched_at: datetime
    last_error: str
    lease_expires_at: datetime | None
    mqtt_request_id: str
    next_attempt_at: datetime | None
    prior_value: JsonValue
    prior_value_at: datetime | None


class CommandUpdates(CommandFields, total=False):
    """What one UPDATE of a transition writes: its ``CommandFields`` plus the status and the
    columns every move sets (``updated_at``) or every end clears."""

    updated_at: datetime
    status: CommandStatus
    status_reason: ReasonCode
    inflight_endpoint: None  # only ever released here; the claim takes it
    finished_at: datetime


@dataclass(frozen=True)
class Transition:
    """One audited step of a command's status, as ``CommandTransition`` records it."""

    to: CommandStatus
    reason: ReasonCode
    detail: str = ""


@dataclass
class GuardedTransition:
    """A command's way from the (status, version) it was read in along ``path`` (audit rows
    in this order), with ``fields`` set on the row at the end; empty ``path``: fields only."""

    command: DeviceCommand
    path: list[Transition]
    fields: CommandFields = field(default_factory=CommandFields)

    @property
    def to(self) -> CommandStatus:
        return self.path[-1].to if self.path else CommandStatus(self.command.status)


def guarded_transitions_apply(
    moves: Sequence[GuardedTransition], *, now: datetime
) -> list[GuardedTransition]:
    """Apply the transitions; returns those that happened (the others lost a race and wrote
    nothing). The commands of moved rows are updated in place."""
    moves = [m for m in moves if m.path or m.fields]
    if not moves:
        return []
    # No savepoint: nested in a stage's transaction, a failure here fails the whole batch
    # anyway, and a savepoint costs two more round trips per batch.
    with transaction.atomic(savepoint=False):
        moved_ids = ledger_move(COMMANDS, [_move(m, now) for m in moves], now=now)
        done = [m for m in moves if m.command.pk in moved_ids]
        # The ledger's set-based insert sends no post_save: its counters are fed here instead.
        audit = _audit_rows(done, now)
        after_commit(lambda: metrics_transitions_recorded(transitions=audit))
        released = [m.command.target_device_endpoint_id for m in done if m.to in COMMAND_TERMINAL]
        if released:
            after_commit(lambda: endpoints_released(released))
        _ends_follow(done, now)
    for move in done:
        ledger_row_follow(COMMANDS, move.command, _move(move, now), now=now)
        for step in move.path:
            logger.info(
                "command %s -> %s (%s)",
                move.command.device_command_id,
                step.to,
                step.reason,
                extra={
                    "commandIntentId": move.command.pk,
                    "deviceCommandId": move.command.device_command_id,
                },
            )
    return done


class CommandInsert(NamedTuple):
    """A command to create: its row (its idempotency key names it) and its first audit row's
    status and why. ``created`` None: a rule's decision, whose execution row says why."""

    row: CommandRow
    created: Transition | None = None


def commands_insert(commands: Sequence[CommandInsert], *, now: datetime) -> dict[str, int]:
    """The one way a command is created: one INSERT for the batch, a key already in the
    ledger absorbed (a twin made it first), then the first audit rows of the rows inserted
    here, moves from no status (``ledger_created``), in one INSERT more, counted once
    committed (a set-based insert sends no post_save). Idempotency key -> id of each row
    inserted here; a key missing from it was absorbed."""
    if not commands:
        return {}
    made = insert_ignore_returning(
        DeviceCommand, [as_row(c.row) for c in commands], returning=("idempotency_key", "id")
    )
    ids = {str(key): int(pk) for key, pk in made}
    created = [
        (ids[key], c.created)
        for c in commands
        if c.created is not None and (key := c.row.columns.idempotency_key) in ids
    ]
    if not created:
        return ids
    ledger_created(COMMANDS, [(pk, Step(t.to, _audit(t))) for pk, t in created], now=now)
    audit = [
        CommandTransition(
            command_id=pk,
            from_status="",
            to_status=t.to,
            reason_code=t.reason,
            detail=t.detail[:DETAIL_MAX_CHARS],
            at=now,
        )
        for pk, t in created
    ]
    after_commit(lambda: metrics_transitions_recorded(transitions=audit))
    return ids


def _ends_follow(done: Sequence[GuardedTransition], now: datetime) -> None:
    """The run-time limits of the commands that applied, the alarms of those that ended badly
    (see the module docstring); no query when the batch has neither."""
    limited = [m for m in done if m.to == CommandStatus.APPLIED and m.command.max_on_s]
    ended = [m for m in done if m.to in ALARMED_ENDS and m.path[-1].reason not in QUIET_ENDS]
    if not limited and not ended:
        return
    farms = device_farms(m.command.target_device_id for m in (*limited, *ended))
    if limited:
        applied = [(m.command, m.fields.get("applied_at") or now) for m in limited]
        run_limits_ensure(applied=applied, farms=farms, now=now)
    if ended:
        commands = [
            CommandEnded(m.command.pk, farms[m.command.target_device_id], m.to) for m in ended
        ]
        command_alarms_raise(commands=commands, now=now)


def _updates(move: GuardedTransition, now: datetime) -> CommandUpdates:
    updates: CommandUpdates = {"updated_at": now, **move.fields}
    if move.path:
        updates["status"], updates["status_reason"] = move.to, move.path[-1].reason
        if move.to in COMMAND_TERMINAL:
            updates["inflight_endpoint"], updates["finished_at"] = None, now
            updates["lease_expires_at"], updates["next_attempt_at"] = None, None
    return updates


def _move(move: GuardedTransition, now: datetime) -> Move:
    """The transition as the ledger takes it: from the (status, version) it was read with."""
    command = move.command
    sets = {k: v for k, v in _updates(move, now).items() if k not in ("status", "updated_at")}
    steps = [Step(t.to, _audit(t)) for t in move.path]
    return Move(command.pk, command.status, command.version, steps, sets)


def _audit(step: Transition) -> dict[str, object]:
    """A step's own audit columns (the ledger fills in the command, statuses, time, attempt)."""
    return {"reason_code": step.reason, "detail": step.detail[:DETAIL_MAX_CHARS]}


def _audit_rows(done: Sequence[GuardedTransition], now: datetime) -> list[CommandTransition]:
    rows: list[CommandTransition] = []
    for move in done:
        before = move.command.status
        attempt = move.fields.get("attempt_count", move.command.attempt_count)
        for step in move.path:
            rows.append(
                CommandTransition(
                    command=move.command,
                    from_status=before,
                    to_status=step.to,
                    reason_code=step.reason,
                    detail=step.detail[:DETAIL_MAX_CHARS],
                    attempt=attempt,
                    at=now,
                )
            )
            before = step.to
    return rows


def endpoints_released(endpoint_ids: list[int]) -> None:
    """Hand each freed endpoint to the oldest command waiting for it, in one query and one
    nudge for the whole batch."""
    coordination.inflights_clear(endpoint_ids)
    first = endpoints_next_waiting(endpoint_ids)
    if first:
        hand_on(Committed(commands=sorted(first.values())))
