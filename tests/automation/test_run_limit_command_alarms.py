"""A command that ends failed, expired or uncertain raises its alarm in the transaction of that
move (``guarded_transitions_apply``), as the farm's alarm policy chooses; one the system or a person
chose to end (superseded before it was sent, marked failed by support) raises none, and a
batch of commands that end costs the same statements however many ended."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta

import pytest
from django.contrib.auth.models import User
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from alarms.models import Alarm, AlarmPolicy
from automation.models import DeviceCommand
from automation.services.manual import endpoint_command_manual
from automation.services.support import command_mark_failed
from automation.services.transitions import GuardedTransition, Transition, guarded_transitions_apply
from automation.states import CommandStatus, ReasonCode
from tests.automation.conftest import make_intent
from tests.devices.factories import FarmKit, make_farm

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("clock_at_fixture_dates")]


def _pending(kit: FarmKit) -> DeviceCommand:
    kit.rule(target_value=True)
    return make_intent(kit)


def _end(commands: list[DeviceCommand], to: CommandStatus, reason: ReasonCode) -> None:
    moves = [GuardedTransition(c, [Transition(to, reason)]) for c in commands]
    assert len(guarded_transitions_apply(moves, now=timezone.now())) == len(commands)


def _alarms() -> list[tuple[str, int, str, str]]:
    rows = Alarm.objects.order_by("pk")
    return list(rows.values_list("type", "source_id", "status", "severity"))


def test_a_command_that_fails_raises_its_alarm_once() -> None:
    kit = make_farm()
    command = _pending(kit)
    _end([command], CommandStatus.FAILED, ReasonCode.TARGET_DISABLED)
    assert _alarms() == [("command_failed", command.pk, "active", "major")]
    alarm = Alarm.objects.get()
    assert (alarm.farm_id, alarm.source, alarm.count) == (kit.farm.pk, "command", 1)


def test_an_expired_and_an_uncertain_command_raise_theirs() -> None:
    kit, other = make_farm(), make_farm()
    expired, uncertain = _pending(kit), _pending(other)
    _end([expired], CommandStatus.EXPIRED, ReasonCode.RETRY_BUDGET_EXHAUSTED)
    DeviceCommand.objects.filter(pk=uncertain.pk).update(status=CommandStatus.DISPATCHED)
    uncertain.refresh_from_db()
    _end([uncertain], CommandStatus.UNCERTAIN, ReasonCode.NO_APPLIED_EVIDENCE)
    assert {(t, s) for t, s, _, _ in _alarms()} == {
        ("command_expired", expired.pk),
        ("command_uncertain", uncertain.pk),
    }


def test_the_farms_policy_chooses_which_ends_raise() -> None:
    kit = make_farm()
    AlarmPolicy.objects.create(farm=kit.farm, command_statuses=["failed"])
    command = _pending(kit)
    _end([command], CommandStatus.EXPIRED, ReasonCode.RETRY_BUDGET_EXHAUSTED)
    assert _alarms() == []


def test_ends_the_system_or_a_person_chose_raise_nothing() -> None:
    kit = make_farm()
    user = User.objects.create_user(username="olga")
    replaced = _pending(kit)
    # A manual command replaces the rule's unsent one (expired/superseded) ...
    manual = endpoint_command_manual(
        endpoint_id=kit.io1.pk, value=False, actor=user, reason="off for the harvest"
    ).command
    assert DeviceCommand.objects.get(pk=replaced.pk).status_reason == ReasonCode.SUPERSEDED
    # ... and support marks the manual one failed by hand.
    assert command_mark_failed(command_id=manual.pk, actor="support", reason="stuck")
    assert _alarms() == []


def test_an_applied_command_raises_nothing() -> None:
    command = _pending(make_farm())
    DeviceCommand.objects.filter(pk=command.pk).update(status=CommandStatus.DISPATCHED)
    command.refresh_from_db()
    at = timezone.now() + timedelta(seconds=1)
    moves = [
        GuardedTransition(
            command,
            [Transition(CommandStatus.APPLIED, ReasonCode.STATE_REPORTED)],
            {"applied_at": at},
        )
    ]
    assert guarded_transitions_apply(moves, now=at)
    assert _alarms() == []


def _counted(work: Callable[[], None]) -> int:
    with CaptureQueriesContext(connection) as ctx:
        work()
    return len(ctx.captured_queries)


def test_a_batch_that_ends_without_alarms_or_limits_costs_no_extra_statement(
    on_postgres: bool,
) -> None:
    """The hot path: a batch of plain moves reads neither farms nor policies."""

    def moved(n: int) -> int:
        commands = [_pending(make_farm()) for _ in range(n)]
        DeviceCommand.objects.filter(pk__in=[c.pk for c in commands]).update(
            status=CommandStatus.DISPATCHED
        )
        fresh = list(DeviceCommand.objects.filter(pk__in=[c.pk for c in commands]))
        moves = [
            GuardedTransition(c, [Transition(CommandStatus.ACKNOWLEDGED, ReasonCode.ACKNOWLEDGED)])
            for c in fresh
        ]
        return _counted(lambda: guarded_transitions_apply(moves, now=timezone.now()) and None)

    # PostgreSQL: the UPDATE with its audit rows in one statement; SQLite: UPDATE, then INSERT.
    assert moved(1) == moved(4) == (1 if on_postgres else 2)
