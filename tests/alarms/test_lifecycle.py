"""Raise, acknowledge and clear: one open alarm per (source, source id, type) however many
raise it, and every status move audited with who (a person) or what (a cause) moved it."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from alarms.models import Alarm, AlarmPolicy, AlarmTransition
from alarms.services import (
    CommandEnded,
    alarm_acknowledge,
    alarm_clear,
    alarm_clear_by_cause,
    alarm_raise,
    command_alarms_raise,
)
from alarms.states import AlarmReason, AlarmStatus
from tests.concurrency import race
from tests.devices.factories import FarmFactory

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


def offline(farm_id: int, *, device_id: int = 7, at: datetime = NOW) -> int:
    return alarm_raise(
        farm_id=farm_id,
        source="device",
        source_id=device_id,
        type="device_offline",
        severity="major",
        detail="no message for 90 s",
        actor="device health",
        now=at,
    )


def trail(alarm_id: int) -> list[tuple[str, str, str, str, str]]:
    return list(
        AlarmTransition.objects.filter(alarm_id=alarm_id)
        .order_by("pk")
        .values_list("from_status", "to_status", "reason", "actor", "comment")
    )


@pytest.mark.django_db
def test_a_repeat_raise_counts_on_the_open_alarm_and_a_raise_after_a_clear_opens_a_new_one():
    farm = FarmFactory()
    first = offline(farm.pk)
    assert offline(farm.pk, at=NOW + timedelta(minutes=1)) == first
    alarm = Alarm.objects.get(pk=first)
    assert (alarm.count, alarm.status, alarm.organization_id) == (2, "active", farm.organization_id)
    assert (alarm.first_raised_at, alarm.last_raised_at) == (NOW, NOW + timedelta(minutes=1))
    assert alarm.next_notify_at == NOW  # its first notification is due at once
    assert alarm_clear_by_cause(
        source="device", source_id=7, type="device_offline", cause="device back", now=NOW
    )
    second = offline(farm.pk, at=NOW + timedelta(minutes=2))
    assert second != first
    assert Alarm.objects.filter(status=AlarmStatus.CLEARED).count() == 1


@pytest.mark.django_db
def test_auto_clear_acknowledge_and_clear_are_each_audited_with_their_actor():
    farm = FarmFactory()
    auto = offline(farm.pk)
    assert alarm_clear_by_cause(
        source="device", source_id=7, type="device_offline", cause="device back", now=NOW
    )
    assert not alarm_clear_by_cause(
        source="device", source_id=7, type="device_offline", cause="device back", now=NOW
    )
    assert trail(auto) == [
        ("", "active", AlarmReason.RAISED, "device health", "no message for 90 s"),
        ("active", "cleared", AlarmReason.CLEARED_BY_CAUSE, "device back", ""),
    ]
    cleared = Alarm.objects.get(pk=auto)
    assert (cleared.cleared_by, cleared.cleared_at, cleared.next_notify_at) == (
        "device back",
        NOW,
        None,
    )

    manual = offline(farm.pk, device_id=8)
    assert alarm_acknowledge(alarm_id=manual, actor="alice", comment="on my way", now=NOW)
    assert not alarm_acknowledge(alarm_id=manual, actor="bob", comment="me too", now=NOW)
    assert alarm_clear(alarm_id=manual, actor="alice", comment="fuse replaced", now=NOW)
    assert not alarm_clear(alarm_id=manual, actor="bob", comment="again", now=NOW)
    assert trail(manual)[1:] == [
        ("active", "acknowledged", AlarmReason.ACKNOWLEDGED, "alice", "on my way"),
        ("acknowledged", "cleared", AlarmReason.CLEARED_BY_HAND, "alice", "fuse replaced"),
    ]
    done = Alarm.objects.get(pk=manual)
    assert (done.acknowledged_by, done.acknowledge_comment) == ("alice", "on my way")
    assert (done.cleared_by, done.clear_comment, done.status) == (
        "alice",
        "fuse replaced",
        "cleared",
    )


@pytest.mark.django_db
def test_a_raise_with_an_unknown_severity_writes_nothing():
    farm = FarmFactory()
    with pytest.raises(ValueError, match="severity"):
        alarm_raise(
            farm_id=farm.pk,
            source="device",
            source_id=1,
            type="device_offline",
            severity="loud",
            actor="x",
            now=NOW,
        )
    assert not Alarm.objects.exists()


@pytest.mark.django_db
def test_command_alarms_follow_the_farms_policy():
    default_farm, picky_farm = FarmFactory(), FarmFactory()
    AlarmPolicy.objects.create(farm=picky_farm, command_statuses=["failed"])
    ended = [
        CommandEnded(command_id=1, farm_id=default_farm.pk, status="expired"),
        CommandEnded(command_id=2, farm_id=picky_farm.pk, status="expired"),
        CommandEnded(command_id=3, farm_id=picky_farm.pk, status="failed"),
        CommandEnded(command_id=4, farm_id=default_farm.pk, status="applied"),
    ]
    assert command_alarms_raise(commands=ended, now=NOW) == 2
    assert sorted(Alarm.objects.values_list("source_id", "type", "severity")) == [
        (1, "command_expired", "minor"),
        (3, "command_failed", "major"),
    ]


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_two_concurrent_raisers_end_with_one_alarm_counted_twice():
    farm = FarmFactory()
    assert race(lambda: offline(farm.pk), 2) == []
    alarm = Alarm.objects.get()
    assert (alarm.count, alarm.status) == (2, "active")
    assert AlarmTransition.objects.filter(alarm=alarm).count() == 1
