"""Support's admin: scheduler actions ask for a reason and leave an audit row; intents and
executions show their timeline; a staff user sees only their organisations' rows."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.contrib.auth.models import Permission, User
from django.test import Client
from django.utils import timezone

from automation.models import AutomationCommandIntent, CommandTransition
from automation.states import CommandStatus
from events.models import EventDeadLetter
from events.services import event_transport
from scheduler.models import (
    AutomationSchedulerTransition,
    AutomationType,
    TriggerType,
)
from scheduler.states import SchedulerStatus
from tests.automation.conftest import dispatch, make_intent
from tests.conftest import Tenant
from tests.scheduler.factories import AutomationSchedulerFactory

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("clock_at_fixture_dates")]
SCHEDULER_URL = "/admin/scheduler/automationscheduler/"
INTENT_URL = "/admin/automation/automationcommandintent/"


@pytest.fixture
def support(client: Client) -> Client:
    User.objects.create_superuser("support", "s@example.com", "pw")
    client.login(username="support", password="pw")
    return client


def _row(key: str, *, held: bool = False, status: str = SchedulerStatus.PENDING) -> Any:
    now = timezone.now()
    return AutomationSchedulerFactory(
        automation_type=AutomationType.REPORT_SUBSCRIPTION,
        trigger_type=TriggerType.MANUAL_RUN,
        scheduler_key=key,
        scheduled_on=now - timedelta(minutes=1),
        status=status,
        is_on_support_hold=held,
        retry_count=3 if held else 0,
        next_retry_on=None if held else now + timedelta(hours=1),
        input_hash="0" * 64,
        created_on=now,
        updated_on=now,
    )


def _act(client: Client, url: str, action: str, ids: list[int], reason: str | None) -> Any:
    data: dict[str, Any] = {"action": action, "_selected_action": [str(i) for i in ids]}
    if reason is not None:
        data.update(apply="1", reason=reason)
    return client.post(url, data, follow=True)


def test_changelist_filters_and_search(support: Client) -> None:
    _row("report-subscription:a:manual:1", held=True)
    _row("report-subscription:b:manual:2")
    page = support.get(SCHEDULER_URL, {"is_on_support_hold__exact": "1"})
    assert page.status_code == 200
    assert b"report-subscription:a:manual:1" in page.content
    assert b"report-subscription:b:manual:2" not in page.content
    page = support.get(SCHEDULER_URL, {"q": "b:manual"})
    assert b"report-subscription:b:manual:2" in page.content
    assert b"report-subscription:a:manual:1" not in page.content


def test_release_hold_asks_for_a_reason_then_audits_who_and_why(support: Client) -> None:
    row = _row("report-subscription:h:manual:1", held=True)
    page = _act(support, SCHEDULER_URL, "release_hold", [row.pk], None)
    assert b'name="reason"' in page.content  # the intermediate form
    row.refresh_from_db()
    assert row.is_on_support_hold
    page = _act(support, SCHEDULER_URL, "release_hold", [row.pk], "")
    row.refresh_from_db()
    assert row.is_on_support_hold  # a reason is required
    _act(support, SCHEDULER_URL, "release_hold", [row.pk], "customer fixed the webhook")
    row.refresh_from_db()
    assert not row.is_on_support_hold and row.status == SchedulerStatus.PENDING
    assert row.version == 1 and row.retry_count == 3
    audit = AutomationSchedulerTransition.objects.get(scheduler=row)
    assert audit.reason_code == "support_released"
    assert audit.detail == "by support: customer fixed the webhook"


def test_retry_now_and_cancel(support: Client) -> None:
    waiting = _row("report-subscription:w:manual:1")
    done = _row("report-subscription:d:manual:1", status=SchedulerStatus.COMPLETED)
    _act(support, SCHEDULER_URL, "retry_now", [waiting.pk, done.pk], "urgent")
    waiting.refresh_from_db()
    done.refresh_from_db()
    assert waiting.next_retry_on is None and waiting.version == 1
    assert done.status == SchedulerStatus.COMPLETED and done.version == 0  # never re-sent
    _act(support, SCHEDULER_URL, "cancel", [waiting.pk], "duplicate subscription")
    waiting.refresh_from_db()
    assert waiting.status == SchedulerStatus.CANCELLED
    assert AutomationSchedulerTransition.objects.filter(
        scheduler=waiting, reason_code="cancelled", detail="by support: duplicate subscription"
    ).exists()


def test_scheduler_object_page_is_read_only(support: Client) -> None:
    row = _row("report-subscription:r:manual:1")
    url = f"{SCHEDULER_URL}{row.pk}/change/"
    assert support.get(url).status_code == 200
    support.post(url, {"status": "completed", "scheduler_key": "x"})
    row.refresh_from_db()
    assert row.status == SchedulerStatus.PENDING and row.scheduler_key.endswith(":r:manual:1")


def _staff_permissions(user: User) -> None:
    codenames = ["view_automationcommandintent", "change_automationcommandintent"]
    codenames += ["view_automationscheduler", "change_automationscheduler"]
    user.user_permissions.add(*Permission.objects.filter(codename__in=codenames))


def test_staff_sees_only_their_organisations_intents(
    client: Client, tenants: tuple[Tenant, Tenant]
) -> None:
    alpha, beta = tenants
    alpha.kit.rule()
    beta.kit.rule()
    mine, theirs = make_intent(alpha.kit), make_intent(beta.kit)
    _staff_permissions(alpha.user)
    _row("report-subscription:s:manual:1")
    client.login(username="alpha", password="pw")
    page = client.get(INTENT_URL)
    assert page.status_code == 200
    assert f"{INTENT_URL}{mine.pk}/change/".encode() in page.content
    assert f"{INTENT_URL}{theirs.pk}/change/".encode() not in page.content
    assert client.get(f"{INTENT_URL}{mine.pk}/change/").status_code == 200
    assert client.get(f"{INTENT_URL}{theirs.pk}/change/").status_code == 302  # "doesn't exist"
    # Scheduler rows carry no organisation yet: superusers only.
    assert b"report-subscription:s" not in client.get(SCHEDULER_URL).content


def test_intent_page_shows_timeline_and_mark_failed_is_guarded(support: Client) -> None:
    from tests.devices.factories import make_farm

    kit = make_farm(prefix="adm")
    kit.rule()
    intent = dispatch(make_intent(kit))
    page = support.get(f"{INTENT_URL}{intent.pk}/change/")
    assert b"pending_dispatch -&gt; dispatched" in page.content
    _act(support, INTENT_URL, "mark_failed", [intent.pk], "relay wired wrong")
    intent = AutomationCommandIntent.objects.get(pk=intent.pk)
    assert intent.status == CommandStatus.FAILED and intent.status_reason == "manual"
    assert intent.inflight_endpoint_id is None
    last = CommandTransition.objects.filter(intent=intent).order_by("-pk").first()
    assert last is not None and last.detail == "by support: relay wired wrong"
    page = _act(support, INTENT_URL, "mark_failed", [intent.pk], "again")
    assert b"0 done, 1 skipped" in page.content


def test_dead_letter_replay_action(support: Client, django_capture_on_commit_callbacks) -> None:
    envelope = {
        "event_id": "e1",
        "idempotency_key": "k1",
        "type": "test.Ping",
        "occurred_at": "2026-01-01T00:00:00.000000Z",
        "producer": "test",
        "version": 1,
        "payload": {},
    }
    dead = EventDeadLetter.objects.create(
        envelope=envelope,
        event_type="test.Ping",
        idempotency_key="k1",
        handler="h",
        reason="retries_exhausted",
        created_at=timezone.now(),
    )
    sent: list[dict[str, Any]] = []
    with event_transport(sent.append), django_capture_on_commit_callbacks(execute=True):
        support.post(
            "/admin/events/eventdeadletter/",
            {"action": "replay", "_selected_action": [str(dead.pk)]},
        )
    dead.refresh_from_db()
    assert dead.status == "replayed" and dead.replayed_by == "support"
    assert [m["idempotency_key"] for m in sent] == ["k1"]
