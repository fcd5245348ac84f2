"""The one guarded update of every ledger (commands, due work, notifications, rollouts and
their targets, dead letters, user messages, alarms): a row moves only from the status (and
version) it was read with, and every step of its move gets its audit row in the same
statement on PostgreSQL (a data-modifying CTE) or the same transaction on SQLite (which runs
no UPDATE inside a WITH). A row that moved meanwhile is left alone and gets no audit row:
the caller learns which rows moved and returns, it does not raise.

An audit row records a move: a step from a status to itself is refused unless the ledger's
state machine lists that edge (the scheduler's pending rows, rescheduled or held in place);
a note about a row is no transition. Moves are grouped by the columns they write, one
statement per group whatever the number of rows, each run through ``common.hot_sql`` (a
prepared statement on PostgreSQL)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, cast

from django.db import connection, models, transaction

from common.audit.writes import audited_fields, audited_write
from common.hot_sql import hot_rows
from common.sql import GuardedUpdate, insert_ignore_returning, unnest_relation

# Every audit table names its move and its time so.
AUDIT_FROM, AUDIT_TO, AUDIT_AT = "from_status", "to_status", "at"


class NoteIsNoMove(ValueError):
    """A step from a status to itself on a ledger whose state machine has no such edge."""


@dataclass(frozen=True)
class Ledger:
    """A table whose rows move between statuses: ``status`` and, where the table has one,
    ``version`` (compared and bumped by every move) and ``touched`` (set to the move's time).
    ``audit`` is its audit table, pointing at the row by ``audit_row``; ``copies`` are audit
    columns read from the row as the move left it (audit column → row column). ``edges``,
    when given, are the allowed moves (from → to): a move along another is not made."""

    model: type[models.Model]
    status: str = "status"
    version: str | None = "version"
    touched: str | None = None
    audit: type[models.Model] | None = None
    audit_row: str = ""
    copies: Mapping[str, str] = field(default_factory=dict)
    edges: Mapping[str, Collection[str]] | None = None


@dataclass(frozen=True)
class Step:
    """One step of a move: the status it reaches and its audit row's own columns (reason,
    detail, actor; the row, the statuses and the time are filled in). ``audit`` None: a
    step with no audit row of its own, a claim, which the end of its attempt records."""

    to: str
    audit: Mapping[str, object] | None = field(default_factory=dict)


@dataclass(frozen=True)
class Move:
    """A row's move from the ``status`` and ``version`` it was read with, along ``steps``
    (audit rows in this order; none: only ``sets`` are written, under the same guard), with
    ``sets`` written on the row beside its status, version and touched time."""

    pk: Any
    status: str
    version: int | None = None
    steps: Sequence[Step] = ()
    sets: Mapping[str, object] = field(default_factory=dict)

    @property
    def to(self) -> str:
        return self.steps[-1].to if self.steps else self.status


def ledger_move(ledger: Ledger, moves: Iterable[Move], *, now: datetime) -> set[Any]:
    """Make the moves; the primary keys of the rows that moved (the others were moved by
    someone else meanwhile, or asked for a move the ledger does not allow, and nothing of
    theirs was written)."""
    groups: dict[tuple[str, ...], list[tuple[Move, dict[str, object]]]] = defaultdict(list)
    for move in moves:
        if _allowed(ledger, move):
            updates = ledger_updates(ledger, move, now=now)
            groups[tuple(sorted(updates))].append((move, updates))
    if not groups:
        return set()
    followed = audited_fields(ledger.model)
    logged = [key for key in groups if followed and followed & {_name(ledger, c) for c in key}]
    if connection.vendor == "postgresql" and len(groups) == 1 and not logged:
        # One statement is atomic on its own: no transaction of its own, no round trip more.
        ((key, members),) = groups.items()
        return _group_move(ledger, key, members, now)[0]
    moved: set[Any] = set()
    audit: list[dict[str, object]] = []
    # No savepoint: nested in a caller's transaction, a failure here fails it anyway, and a
    # savepoint costs two more round trips.
    with transaction.atomic(savepoint=False):
        for key, members in sorted(groups.items()):
            if key in logged:
                done, rows = _audited_group_move(ledger, key, members, now)
            else:
                done, rows = _group_move(ledger, key, members, now)
            moved |= done
            audit.extend(rows)
        if audit and ledger.audit is not None:
            insert_ignore_returning(ledger.audit, audit)
    return moved


def ledger_move_row(
    ledger: Ledger,
    row: models.Model,
    *,
    steps: Sequence[Step] = (),
    sets: Mapping[str, object] | None = None,
    now: datetime,
) -> bool:
    """Move one row (as read: its status and version are the guard); False if it moved
    meanwhile or the move is not allowed. The instance follows on success."""
    version = getattr(row, ledger.version) if ledger.version else None
    move = Move(row.pk, getattr(row, ledger.status), version, tuple(steps), dict(sets or {}))
    if not ledger_move(ledger, [move], now=now):
        return False
    ledger_row_follow(ledger, row, move, now=now)
    return True


def ledger_row_follow(ledger: Ledger, row: models.Model, move: Move, *, now: datetime) -> None:
    """The instance as ``move`` left its row (a caller that moved a batch of instances)."""
    for name, value in ledger_updates(ledger, move, now=now).items():
        setattr(row, _field(ledger.model, name).attname, value)
    if ledger.version:
        setattr(row, ledger.version, getattr(row, ledger.version) + 1)


def ledger_updates(ledger: Ledger, move: Move, *, now: datetime) -> dict[str, object]:
    """The columns ``move`` writes beside the version's bump: its status (when it has steps),
    the touched time (unless it sets one) and its ``sets``."""
    updates: dict[str, object] = {}
    if ledger.touched:
        updates[ledger.touched] = now
    updates |= move.sets
    if move.steps:
        updates[ledger.status] = move.to
    return updates


def ledger_created(ledger: Ledger, rows: Sequence[tuple[Any, Step]], *, now: datetime) -> None:
    """The audit rows of rows just inserted (primary key, the status it was created in):
    each a move from no status (""). Its ``copies`` are given, as the row was inserted."""
    audit = cast(type[models.Model], ledger.audit)
    made = [
        {
            **(step.audit or {}),
            ledger.audit_row: pk,
            AUDIT_FROM: "",
            AUDIT_TO: step.to,
            AUDIT_AT: now,
        }
        for pk, step in rows
    ]
    if made:
        insert_ignore_returning(audit, _complete(audit, made, leave=()))


def _allowed(ledger: Ledger, move: Move) -> bool:
    before = move.status
    for step in move.steps:
        if ledger.edges is not None:
            if step.to not in ledger.edges.get(before, ()):
                return False
        elif step.to == before:
            raise NoteIsNoMove(f"{ledger.model.__name__} {move.pk}: {before} → {step.to}")
        if step.audit and ledger.audit is None:
            raise ValueError(f"{ledger.model.__name__} has no audit table for {step.audit}")
        before = step.to
    return True


def _field(model: type[models.Model], name: str) -> Any:
    """A concrete column of ``model`` by name or attname (``farm`` or ``farm_id``)."""
    return model._meta.get_field(name)


def _name(ledger: Ledger, column: str) -> str:
    return str(_field(ledger.model, column).name)


def _guard(ledger: Ledger, move: Move) -> dict[str, object]:
    pk = cast(Any, ledger.model._meta.pk).name
    guard: dict[str, object] = {pk: move.pk, ledger.status: move.status}
    if ledger.version:
        guard[ledger.version] = move.version
    return guard


def _audit_rows(ledger: Ledger, move: Move, now: datetime) -> list[dict[str, object]]:
    rows: list[dict[str, object]] = []
    before = move.status
    for step in move.steps:
        if step.audit is None or ledger.audit is None:
            before = step.to
            continue
        if set(step.audit) & set(ledger.copies):
            raise ValueError(f"{sorted(ledger.copies)} are read from the moved row")
        rows.append(
            {
                **step.audit,
                ledger.audit_row: move.pk,
                AUDIT_FROM: before,
                AUDIT_TO: step.to,
                AUDIT_AT: now,
            }
        )
        before = step.to
    return rows


def _complete(
    audit: type[models.Model], rows: list[dict[str, object]], *, leave: Collection[str]
) -> list[dict[str, object]]:
    """Every audit row with the same columns: every concrete one but the primary key and
    ``leave`` (read from the moved row), a column a step did not give taking its default."""
    fields = [f for f in audit._meta.concrete_fields if not f.primary_key and f.name not in leave]
    complete = []
    for row in rows:
        filled: dict[str, object] = {}
        for f in fields:
            if f.name in row:
                filled[f.name] = row[f.name]
            elif f.has_default() or f.null or f.empty_strings_allowed:
                filled[f.name] = f.get_default()
            else:
                raise ValueError(f"audit column {f.name} missing from {row}")
        complete.append(filled)
    return complete


def _group_move(
    ledger: Ledger,
    key: tuple[str, ...],
    members: list[tuple[Move, dict[str, object]]],
    now: datetime,
) -> tuple[set[Any], list[dict[str, object]]]:
    """One group's guarded UPDATE. On PostgreSQL its audit rows go in the same statement;
    on SQLite they are returned, with their copies, for the caller's one INSERT."""
    match = list(_guard(ledger, members[0][0]))
    copies = list(ledger.copies.items())
    update = GuardedUpdate.of(
        ledger.model,
        match,
        list(key),
        bump=ledger.version,
        returning=[column for _, column in copies],
    )
    pairs = [(_guard(ledger, move), updates) for move, updates in members]
    audit = [row for move, _ in members for row in _audit_rows(ledger, move, now)]
    if connection.vendor == "postgresql" and audit and ledger.audit is not None:
        return {r[0] for r in _moved_and_audited(ledger, update, pairs, audit)}, []
    returned = update.run(pairs)
    moved = {r[0] for r in returned}
    read = {
        r[0]: {
            name: _field(ledger.model, column).to_python(value)
            for (name, column), value in zip(copies, r[1:], strict=True)
        }
        for r in returned
    }
    written = [
        {**row, **read[row[ledger.audit_row]]} for row in audit if row[ledger.audit_row] in moved
    ]
    if written and ledger.audit is not None:
        written = _complete(ledger.audit, written, leave=())
    return moved, written


def _audited_group_move(
    ledger: Ledger,
    key: tuple[str, ...],
    members: list[tuple[Move, dict[str, object]]],
    now: datetime,
) -> tuple[set[Any], list[dict[str, object]]]:
    """A group that changes configuration the audit log follows (a rollout's status, a
    device's): its entries too, the rows' fields before and after."""
    written: list[dict[str, object]] = []

    def write() -> set[Any]:
        moved, rows = _group_move(ledger, key, members, now)
        written.extend(rows)
        return moved

    pks = [move.pk for move, _ in members]
    return audited_write(ledger.model, pks, write), written


def _moved_and_audited(
    ledger: Ledger,
    update: GuardedUpdate,
    pairs: list[tuple[dict[str, object], dict[str, object]]],
    audit: list[dict[str, object]],
) -> list[tuple[Any, ...]]:
    """PostgreSQL: the guarded UPDATE and the audit rows of the rows it moved, in one
    statement, atomic on its own; the audit rows are inserted in the steps' order."""
    audit_model = cast(type[models.Model], ledger.audit)
    meta = audit_model._meta
    qn = connection.ops.quote_name
    rows = _complete(audit_model, audit, leave=ledger.copies)
    given = list(rows[0])
    fields: list[Any] = [*(meta.get_field(name) for name in given), models.IntegerField()]
    names = [*(f"a{i}" for i in range(len(given))), "n"]
    columns: list[list[Any]] = [[row[name] for row in rows] for name in given]
    columns.append(list(range(len(rows))))
    steps, steps_params = unnest_relation(
        fields, names, columns, json_none_is_null=False, alias="audit_in"
    )
    moves, moves_params = update.relation(pairs)
    row_column = names[given.index(ledger.audit_row)]
    pk = qn(cast(Any, ledger.model._meta.pk).column)
    targets = [*given, *ledger.copies]
    inserted = ", ".join(qn(_field(audit_model, name).column) for name in targets)
    copied = [f"moved.{qn(_field(ledger.model, c).column)}" for c in ledger.copies.values()]
    selected = ", ".join([*(f"a.{n}" for n in names[:-1]), *copied])
    sql = (
        f"WITH v AS (SELECT * FROM {moves}), moved AS ({update.sql}), "
        f"a AS (SELECT * FROM {steps}), "
        f"audited AS (INSERT INTO {qn(meta.db_table)} ({inserted}) "
        f"SELECT {selected} FROM a JOIN moved ON moved.{pk} = a.{row_column} ORDER BY a.n) "
        f"SELECT moved.{pk} FROM moved"
    )
    return hot_rows(sql, [*moves_params, *steps_params])
