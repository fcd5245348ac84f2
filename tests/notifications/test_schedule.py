"""The hand-off: one row per (source key, recipient, channel) however often it runs; the
recipient policy says who, preferences say how, and a skipped channel stays visible."""

from __future__ import annotations

import json
from datetime import UTC, date, datetime
from decimal import Decimal
from typing import Any

import pytest
from django.db import transaction
from django.utils import timezone

from config.task_names import NOTIFICATION_DELIVER
from notifications.models import (
    Notification,
    NotificationTransition,
)
from notifications.services import Attachment, notification_schedule
from notifications.services.context import context_decode
from tests.notifications.conftest import NOW
from tests.notifications.factories import ChannelPreferenceFactory, NotificationProfileFactory

pytestmark = pytest.mark.django_db

CONTEXT = {"title": "Vaccinate", "who": "team", "due_on": date(2026, 3, 2)}


def schedule(team, **kw):
    args = {
        "source_key": "reminder:s1:batch:b1:vaccine:2026-03-02:1",
        "farm_id": team.farm.pk,
        "recipient_policy": "everyone",
        "template_name": "due_test",
        "channels": ["email", "webhook", "inbox"],
        "context": CONTEXT,
        "now": NOW,
    }
    args.update(kw)
    return notification_schedule(**args)


def test_repeated_hand_off_creates_each_row_once_and_returns_the_same_coordinates(team):
    first = schedule(team)
    again = [schedule(team) for _ in range(2)]
    assert again == [first, first]
    assert Notification.objects.count() == len(first) == 5 * 3
    assert {(c["recipient"], c["channel"]) for c in first} == {
        (r, ch)
        for r in (
            f"user:{team.owner.pk}",
            f"user:{team.manager.pk}",
            f"user:{team.worker.pk}",
            f"contact:{team.vet.pk}",
            f"contact:{team.hook.pk}",
        )
        for ch in ("email", "webhook", "inbox")
    }
    # One creation transition per row: the re-runs wrote nothing.
    assert NotificationTransition.objects.count() == len(first)
    assert set(first[0]) == {"notification_id", "recipient", "channel", "status"}


def test_coordinates_stay_small_enough_for_dispatch_result_json(team, settings):
    coordinates = schedule(team)
    assert len(json.dumps(coordinates).encode()) < settings.SCHEDULER_RESULT_MAX_BYTES


@pytest.mark.parametrize(
    ("policy", "expected"),
    [
        ("farm_members", {"owner", "manager", "worker"}),
        ("farm_managers", {"owner", "manager"}),
        ("external_contacts", {"vet", "hook"}),
        ("everyone", {"owner", "manager", "worker", "vet", "hook"}),
    ],
)
def test_recipient_policy_decides_who(team, policy, expected):
    keys = {
        f"user:{team.owner.pk}": "owner",
        f"user:{team.manager.pk}": "manager",
        f"user:{team.worker.pk}": "worker",
        f"contact:{team.vet.pk}": "vet",
        f"contact:{team.hook.pk}": "hook",
    }
    coordinates = schedule(team, recipient_policy=policy, channels=["email"])
    assert {keys[c["recipient"]] for c in coordinates} == expected


def test_members_of_another_farm_or_organisation_are_not_told(team):
    from notifications.models import MembershipRole
    from tests.devices.factories import FarmFactory
    from tests.notifications.conftest import make_user
    from tests.notifications.factories import MembershipFactory

    other = FarmFactory()
    outsider = make_user("outsider")
    MembershipFactory(user=outsider, farm=other, role=MembershipRole.OWNER)
    MembershipFactory(user=outsider, organization=other.organization, role=MembershipRole.MANAGER)
    # A viewer on this farm is a member but not a manager.
    MembershipFactory(user=outsider, farm=team.farm, role=MembershipRole.VIEWER)
    managers = {c["recipient"] for c in schedule(team, recipient_policy="farm_managers")}
    members = {
        c["recipient"] for c in schedule(team, recipient_policy="farm_members", source_key="other")
    }
    assert f"user:{outsider.pk}" not in managers
    assert f"user:{outsider.pk}" in members


def test_unknown_policy_or_channel_is_refused_naming_it(team):
    with pytest.raises(ValueError, match="farm_vets"):
        schedule(team, recipient_policy="farm_vets")
    with pytest.raises(ValueError, match="sms"):
        schedule(team, channels=["email", "sms"])
    assert not Notification.objects.exists()


def test_opted_out_channel_is_skipped_with_a_recorded_reason(team):
    ChannelPreferenceFactory(user=team.worker, channel="email", enabled=False, opted_out_at=NOW)
    ChannelPreferenceFactory(contact=team.vet, channel="email", enabled=False)
    schedule(team, channels=["email", "inbox"])
    worker_email = Notification.objects.get(recipient_key=f"user:{team.worker.pk}", channel="email")
    assert worker_email.status == "skipped"
    assert worker_email.status_reason == "opted_out"
    assert "opted out of email" in worker_email.status_detail
    vet_email = Notification.objects.get(recipient_key=f"contact:{team.vet.pk}", channel="email")
    assert (vet_email.status, vet_email.status_reason) == ("skipped", "channel_disabled")
    # The other channel of the same recipient is untouched.
    worker_inbox = Notification.objects.get(recipient_key=f"user:{team.worker.pk}", channel="inbox")
    assert worker_inbox.status == "queued"


def test_unreachable_channels_are_skipped_not_dropped(team):
    schedule(team)
    rows = {(n.recipient_key, n.channel): n for n in Notification.objects.all()}
    vet_inbox = rows[(f"contact:{team.vet.pk}", "inbox")]
    assert (vet_inbox.status, vet_inbox.status_reason) == ("skipped", "channel_unsupported")
    hook_email = rows[(f"contact:{team.hook.pk}", "email")]
    assert (hook_email.status, hook_email.status_reason) == ("skipped", "no_address")
    owner_hook = rows[(f"user:{team.owner.pk}", "webhook")]
    assert (owner_hook.status, owner_hook.status_reason) == ("skipped", "no_address")
    assert rows[(f"contact:{team.hook.pk}", "webhook")].status == "queued"


def test_recipients_are_resolved_at_the_call_and_rows_keep_their_addresses(team):
    schedule(team, channels=["email"])
    team.owner.email = "changed@example.test"
    team.owner.save()
    row = Notification.objects.get(recipient_key=f"user:{team.owner.pk}")
    assert row.address == "owner@example.test"
    # A later hand-off with another key sees the new address.
    schedule(team, channels=["email"], source_key="reminder:next")
    later = Notification.objects.get(
        recipient_key=f"user:{team.owner.pk}", source_key="reminder:next"
    )
    assert later.address == "changed@example.test"


def test_context_dates_are_stored_losslessly_and_attachments_only_on_email(team):
    when = datetime(2026, 3, 2, 1, 30, tzinfo=UTC)
    context = {
        "due_at": when,
        "due_on": date(2026, 3, 2),
        "dose": Decimal("2.50"),
        "items": [{"at": when}],
    }
    schedule(
        team, context=context, attachments=[Attachment("report.csv", "text/csv", "a,b\n1,2\n")]
    )
    email = Notification.objects.filter(channel="email").first()
    inbox = Notification.objects.filter(channel="inbox").first()
    assert context_decode(email.context) == context
    assert email.attachments == [
        {"filename": "report.csv", "content_type": "text/csv", "content": "a,b\n1,2\n"}
    ]
    assert inbox.attachments == []


def test_naive_datetime_in_context_is_refused(team):
    with pytest.raises(ValueError, match=r"context\.due_at"):
        schedule(team, context={"due_at": datetime(2026, 3, 2, 1, 30)})


def test_rows_carry_the_farm_zone_and_locale(team):
    NotificationProfileFactory(farm=team.farm, locale="vi")
    schedule(team, channels=["email"])
    row = Notification.objects.filter(channel="email").first()
    assert (row.time_zone, row.locale) == ("Asia/Ho_Chi_Minh", "vi")


def _recorded(nudged: list[int]) -> Any:
    """Stands in for the hand-off: the delivery tasks it would queue, by notification id."""

    def enqueue(name: str, *args: Any, **kwargs: Any) -> None:
        assert name == NOTIFICATION_DELIVER
        nudged.append(*args)

    return enqueue


def test_delivery_is_queued_only_after_commit(
    team, monkeypatch, django_capture_on_commit_callbacks
):
    nudged: list[int] = []
    monkeypatch.setattr("common.handoff.enqueue", _recorded(nudged))
    with django_capture_on_commit_callbacks(execute=True), transaction.atomic():
        coordinates = schedule(team, channels=["email"])
        assert nudged == []
    queued = [c["notification_id"] for c in coordinates if c["status"] == "queued"]
    assert len(queued) == 4  # the webhook-only contact has no email: skipped, not queued
    assert sorted(nudged) == sorted(queued)
    nudged.clear()
    with django_capture_on_commit_callbacks(execute=True):
        schedule(team, channels=["email"])  # nothing new: nothing queued again
    assert nudged == []


def test_a_rolled_back_hand_off_leaves_nothing(
    team, monkeypatch, django_capture_on_commit_callbacks
):
    nudged: list[int] = []
    monkeypatch.setattr("common.handoff.enqueue", _recorded(nudged))
    with (
        django_capture_on_commit_callbacks(execute=True),
        pytest.raises(RuntimeError),
        transaction.atomic(),
    ):
        schedule(team, channels=["email"])
        raise RuntimeError("the scheduler lost its claim")
    assert not Notification.objects.exists()
    assert nudged == []


def test_now_defaults_to_the_clock(team):
    before = timezone.now()
    schedule(team, channels=["email"], now=None)
    assert Notification.objects.first().created_at >= before
