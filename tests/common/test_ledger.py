"""``common.ledger``: a row moves only from the status and version it was read with, every
step of a move that happened has its audit row (in order, with the columns it copies from
the row as moved), a move lost to another writer writes nothing, and a batch costs one
statement per set of columns written (PostgreSQL: the audit rows in the same statement)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from automation.models import CommandTransition, DeviceCommand
from automation.states import CommandStatus, ReasonCode
from common.ledger import (
    Ledger,
    Move,
    NoteIsNoMove,
    Step,
    ledger_created,
    ledger_move,
    ledger_move_row,
)
from events.models import EventDeadLetter
from events.states import DeadLetterReason, DeadLetterStatus
from scheduler.models import DueWork, DueWorkTransition
from scheduler.services.moves import DUE_WORK
from scheduler.states import SchedulerStatus
from tests.automation.factories import relay_command
from tests.concurrency import race
from tests.devices.factories import FarmKit, make_farm

NOW = datetime(2026, 5, 4, 12, 0, tzinfo=UTC)
C = CommandStatus
# The commands' ledger as ``automation.services.transitions`` declares it, but for its edges
# (here none, so a step in place is a note and raises): several steps per move (a reply that
# proves a command applied acknowledges it first), the attempt copied from the row as the
# move left it.
COMMANDS = Ledger(
    DeviceCommand,
    touched="updated_at",
    audit=CommandTransition,
    audit_row="command",
    copies={"attempt": "attempt_count"},
)


def _command(kit: FarmKit, status: str = C.DISPATCHED) -> DeviceCommand:
    return relay_command(kit, at=NOW - timedelta(minutes=1), status=status, attempt_count=1)


def _step(to: str, reason: str, detail: str = "") -> Step:
    return Step(to, {"reason_code": reason, "detail": detail})


def _trail(command: DeviceCommand) -> list[tuple[str, str, str, int]]:
    rows = CommandTransition.objects.filter(command=command).order_by("pk")
    return list(rows.values_list("from_status", "to_status", "reason_code", "attempt"))


def _due_row(status: str = SchedulerStatus.PROCESSING, version: int = 3) -> DueWork:
    return DueWork.objects.create(
        automation_type="reminder",
        trigger_type="date_based",
        scheduler_key=f"reminder:test:{DueWork.objects.count()}",
        scheduled_on=NOW,
        status=status,
        version=version,
        retry_count=1,
        input_hash="0" * 64,
        created_on=NOW,
        updated_on=NOW,
    )


@pytest.mark.django_db
def test_a_move_writes_its_row_and_one_audit_row_per_step_in_order() -> None:
    command = _command(make_farm())
    path = [_step(C.ACKNOWLEDGED, ReasonCode.ACKNOWLEDGED), _step(C.APPLIED, "state_reported")]
    move = Move(command.pk, C.DISPATCHED, command.version, path, {"attempt_count": 2})
    assert ledger_move(COMMANDS, [move], now=NOW) == {command.pk}
    row = DeviceCommand.objects.get(pk=command.pk)
    assert (row.status, row.version, row.updated_at) == (C.APPLIED, command.version + 1, NOW)
    assert _trail(command) == [
        (C.DISPATCHED, C.ACKNOWLEDGED, "acknowledged", 2),  # the attempt as the move left it
        (C.ACKNOWLEDGED, C.APPLIED, "state_reported", 2),
    ]
    assert set(CommandTransition.objects.values_list("at", flat=True)) == {NOW}


@pytest.mark.django_db
def test_a_row_moved_meanwhile_is_left_alone_and_gets_no_audit_row() -> None:
    kit = make_farm()
    won, lost = _command(kit), relay_command(kit, at=NOW, status=C.DISPATCHED)
    DeviceCommand.objects.filter(pk=lost.pk).update(version=lost.version + 1)  # another writer
    moves = [
        Move(c.pk, C.DISPATCHED, c.version, [_step(C.FAILED, "ack_timeout")]) for c in (won, lost)
    ]
    assert ledger_move(COMMANDS, moves, now=NOW) == {won.pk}
    assert DeviceCommand.objects.get(pk=lost.pk).status == C.DISPATCHED
    assert _trail(lost) == [] and len(_trail(won)) == 1
    # A row read in another status is left alone as well.
    again = Move(won.pk, C.DISPATCHED, won.version + 1, [_step(C.EXPIRED, "expired")])
    assert ledger_move(COMMANDS, [again], now=NOW) == set()


@pytest.mark.django_db
def test_columns_copied_into_the_audit_row_are_read_from_the_row_as_moved() -> None:
    row = _due_row()
    step = Step(SchedulerStatus.PENDING, {"reason_code": "lease_expired", "detail": "x"})
    move = Move(row.pk, SchedulerStatus.PROCESSING, 3, [step], {"retry_count": 2})
    assert ledger_move(DUE_WORK, [move], now=NOW) == {row.pk}
    audit = DueWorkTransition.objects.get(scheduler=row)
    assert (audit.from_status, audit.to_status, audit.version, audit.retry_count) == (
        "processing",
        "pending",
        4,
        2,
    )
    plain = _due_row(version=7)
    done = Step(SchedulerStatus.COMPLETED, {})
    assert ledger_move(DUE_WORK, [Move(plain.pk, SchedulerStatus.PROCESSING, 7, [done])], now=NOW)
    copied = DueWorkTransition.objects.get(scheduler=plain)
    assert (copied.version, copied.retry_count, copied.reason_code) == (8, 1, "")


@pytest.mark.django_db
def test_a_note_is_no_move_and_a_move_off_the_state_machine_is_not_made() -> None:
    command = _command(make_farm())
    note = Move(command.pk, C.DISPATCHED, command.version, [_step(C.DISPATCHED, "wave")])
    with pytest.raises(NoteIsNoMove):
        ledger_move(COMMANDS, [note], now=NOW)
    # Due work lists its edges: completed rows move nowhere, pending may move in place.
    done = _due_row(status=SchedulerStatus.COMPLETED)
    back = Move(done.pk, SchedulerStatus.COMPLETED, 3, [Step(SchedulerStatus.PENDING, {})])
    assert ledger_move(DUE_WORK, [back], now=NOW) == set()
    assert not DueWorkTransition.objects.filter(scheduler=done).exists()
    pending = _due_row(status=SchedulerStatus.PENDING)
    held = Step(SchedulerStatus.PENDING, {"reason_code": "input_hash_conflict"})
    sets = {"is_on_support_hold": True}
    assert ledger_move(DUE_WORK, [Move(pending.pk, "pending", 3, [held], sets)], now=NOW)


@pytest.mark.django_db
def test_a_ledger_without_an_audit_table_moves_and_a_move_without_steps_only_sets() -> None:
    dead = EventDeadLetter.objects.create(
        envelope={},
        event_type="device.status_changed",
        idempotency_key="k",
        handler="h",
        reason=DeadLetterReason.RETRIES_EXHAUSTED,
        created_at=NOW,
    )
    letters = Ledger(EventDeadLetter)
    claim = Move(dead.pk, DeadLetterStatus.OPEN, 0, (), {"replayed_by": "olga"})
    assert ledger_move(letters, [claim], now=NOW) == {dead.pk}
    assert ledger_move(letters, [claim], now=NOW) == set()  # its version moved on
    dead.refresh_from_db()
    assert (dead.status, dead.version, dead.replayed_by) == (DeadLetterStatus.OPEN, 1, "olga")
    assert ledger_move_row(letters, dead, steps=[Step(DeadLetterStatus.REPLAYED)], now=NOW)
    assert (dead.status, dead.version) == (DeadLetterStatus.REPLAYED, 2)  # the instance follows
    assert EventDeadLetter.objects.get(pk=dead.pk).status == DeadLetterStatus.REPLAYED
    with pytest.raises(ValueError, match="no audit table"):
        ledger_move_row(letters, dead, steps=[_step(DeadLetterStatus.OPEN, "x")], now=NOW)


@pytest.mark.django_db
def test_rows_just_created_are_audited_from_no_status() -> None:
    row = _due_row(status=SchedulerStatus.PENDING, version=0)
    audit = {"detail": "ensured", "version": 0, "retry_count": 0}
    ledger_created(DUE_WORK, [(row.pk, Step(SchedulerStatus.PENDING, audit))], now=NOW)
    made = DueWorkTransition.objects.get(scheduler=row)
    assert (made.from_status, made.to_status, made.detail, made.at) == (
        "",
        "pending",
        "ensured",
        NOW,
    )


def _statements(kit: FarmKit, n: int) -> list[str]:
    """A batch of ``n`` commands, half of them with one more column written."""
    commands = [_command(kit) for _ in range(n)]
    moves = [
        Move(
            c.pk,
            C.DISPATCHED,
            c.version,
            [_step(C.ACKNOWLEDGED, "acknowledged")],
            {"acknowledged_at": NOW} if i % 2 else {},
        )
        for i, c in enumerate(commands)
    ]
    with CaptureQueriesContext(connection) as queries:
        assert len(ledger_move(COMMANDS, moves, now=NOW)) == n
    assert CommandTransition.objects.filter(command__in=commands).count() == n
    return [q["sql"] for q in queries.captured_queries]


@pytest.mark.django_db
def test_a_batch_costs_one_statement_per_set_of_columns_however_many_rows(
    on_postgres: bool,
) -> None:
    kit = make_farm()
    small, large = _statements(kit, 2), _statements(kit, 50)
    assert len(small) == len(large)
    # PostgreSQL: each group's UPDATE carries its audit rows; SQLite: one INSERT after them.
    assert len(small) == (2 if on_postgres else 3), small


@pytest.mark.postgres
@pytest.mark.django_db
def test_on_postgresql_a_move_and_its_audit_rows_are_one_statement() -> None:
    command = _command(make_farm())
    path = [_step(C.ACKNOWLEDGED, "acknowledged"), _step(C.APPLIED, "state_reported")]
    with CaptureQueriesContext(connection) as queries:
        moved = ledger_move(
            COMMANDS, [Move(command.pk, C.DISPATCHED, command.version, path)], now=NOW
        )
    assert moved == {command.pk}
    (statement,) = [q["sql"] for q in queries.captured_queries]
    assert "UPDATE" in statement and "INSERT INTO" in statement
    assert [to for _, to, _, _ in _trail(command)] == [C.ACKNOWLEDGED, C.APPLIED]


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_concurrent_moves_from_the_same_read_move_the_row_once() -> None:
    command = _command(make_farm())

    def move() -> None:
        step = _step(C.ACKNOWLEDGED, "acknowledged")
        ledger_move(COMMANDS, [Move(command.pk, C.DISPATCHED, command.version, [step])], now=NOW)

    assert race(move, 4) == []
    assert DeviceCommand.objects.get(pk=command.pk).version == command.version + 1
    assert len(_trail(command)) == 1
