"""Alarm notifications: repeat n of an alarm reaches each recipient on each of their channels
exactly once (people by email and the inbox, external contacts by email and webhook), a
repeat follows every ``repeat_every_s`` until someone acknowledges, and a sweep with nothing
due costs one read."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.core.exceptions import ValidationError

from alarms.models import Alarm, AlarmPolicy
from alarms.services import alarm_acknowledge, alarm_clear_by_cause, alarm_raise
from alarms.states import RECIPIENT_POLICY_NAMES
from notifications.models import Notification
from notifications.services.alarms import alarms_notify
from notifications.services.context import context_decode
from notifications.services.recipients import RECIPIENT_POLICIES
from notifications.services.render import notification_render
from tests.alarms.conftest import People
from tests.concurrency import race

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


def raise_(people: People, severity: str = "major", *, source_id: int = 7) -> int:
    return alarm_raise(
        farm_id=people.farm.pk,
        source="device",
        source_id=source_id,
        type="device_offline",
        severity=severity,
        detail="no message for 90 s",
        actor="device health",
        now=NOW,
    )


def sent(alarm_id: int, repeat: int) -> list[tuple[str, str]]:
    rows = Notification.objects.filter(source_key=f"alarm:{alarm_id}:{repeat}")
    return sorted(rows.values_list("recipient_key", "channel"))


def everyone(people: People) -> list[tuple[str, str]]:
    users = people.user_keys(people.owner, people.manager, people.operator, people.viewer)
    contact = f"contact:{people.contact.pk}"
    return sorted(
        [(u, c) for u in users for c in ("email", "inbox")]
        + [(contact, "email"), (contact, "webhook")]
    )


@pytest.mark.django_db
def test_each_repeat_reaches_each_recipient_and_channel_once_until_acknowledged(
    people: People,
) -> None:
    AlarmPolicy.objects.create(farm=people.farm, repeat_every_s=600)
    alarm_id = raise_(people)
    assert alarms_notify(now=NOW) == 1
    assert sent(alarm_id, 1) == everyone(people)
    assert alarms_notify(now=NOW + timedelta(seconds=599)) == 0  # not due yet
    assert alarms_notify(now=NOW + timedelta(seconds=600)) == 1
    assert sent(alarm_id, 2) == everyone(people)
    raise_(people)  # raised again: counted, not a new round of messages
    assert alarms_notify(now=NOW + timedelta(seconds=601)) == 0
    assert alarm_acknowledge(alarm_id=alarm_id, actor="op", comment="on it", now=NOW)
    assert alarms_notify(now=NOW + timedelta(days=1)) == 0
    assert Notification.objects.count() == 2 * len(everyone(people))
    alarm = Alarm.objects.get(pk=alarm_id)
    assert (alarm.notify_count, alarm.next_notify_at) == (2, None)


@pytest.mark.django_db
def test_a_clear_ends_the_repeats_too(people: People) -> None:
    alarm_id = raise_(people)
    assert alarms_notify(now=NOW) == 1
    alarm_clear_by_cause(
        source="device", source_id=7, type="device_offline", cause="device back", now=NOW
    )
    assert alarms_notify(now=NOW + timedelta(days=1)) == 0
    assert Notification.objects.exclude(source_key=f"alarm:{alarm_id}:1").count() == 0


@pytest.mark.django_db
def test_minor_alarms_reach_the_managers_only(people: People) -> None:
    alarm_id = raise_(people, "minor")
    alarms_notify(now=NOW)
    managers = people.user_keys(people.owner, people.manager)
    assert sent(alarm_id, 1) == sorted((u, c) for u in managers for c in ("email", "inbox"))


@pytest.mark.django_db
def test_a_sweep_with_nothing_due_is_one_read(people: People, django_assert_num_queries) -> None:
    raise_(people)
    alarms_notify(now=NOW)
    with django_assert_num_queries(1):
        assert alarms_notify(now=NOW + timedelta(seconds=1)) == 0


@pytest.mark.django_db
def test_the_message_names_severity_farm_source_type_and_links_the_alarm(people: People) -> None:
    alarm_id = raise_(people, "critical")
    alarms_notify(now=NOW)
    row = Notification.objects.filter(channel="email", user=people.owner).get()
    context = context_decode(row.context)
    assert isinstance(context, dict)
    rendered = notification_render(
        template_name=row.template_name, context=context, locale="en", time_zone="UTC"
    )
    assert rendered.subject.startswith(f"[farm-core] CRITICAL alarm on {people.farm.name}")
    assert "device_offline (device:7)" in rendered.subject
    assert "no message for 90 s" in rendered.body
    assert f"/admin/alarms/alarm/{alarm_id}/change/" in rendered.body
    assert "2026-03-01 12:00:00" in rendered.body


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_two_sweeps_at_once_send_each_repeat_once(people: People) -> None:
    alarm_ids = [raise_(people, source_id=n) for n in range(5)]
    assert race(lambda: alarms_notify(now=NOW), 2) == []
    for alarm_id in alarm_ids:
        assert sent(alarm_id, 1) == everyone(people)
    assert set(Alarm.objects.values_list("notify_count", flat=True)) == {1}
    assert Notification.objects.count() == 5 * len(everyone(people))


def test_every_policy_name_a_farm_may_choose_is_a_recipient_policy() -> None:
    assert set(RECIPIENT_POLICY_NAMES) - {""} <= set(RECIPIENT_POLICIES)


@pytest.mark.django_db
def test_a_policy_with_an_unknown_status_or_recipient_name_is_refused(people: People) -> None:
    policy = AlarmPolicy(farm=people.farm, command_statuses=["applied"], recipients={"x": "y"})
    with pytest.raises(ValidationError) as refused:
        policy.full_clean()
    assert {"command_statuses", "recipients"} <= set(refused.value.message_dict)
