"""Support's scheduler admin: actions ask for a reason and leave an audit row; the object page
is read-only."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.test import Client
from django.utils import timezone

from scheduler.models import (
    AutomationType,
    DueWorkTransition,
    TriggerType,
)
from scheduler.states import SchedulerStatus
from tests.scheduler.factories import DueWorkFactory

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("clock_at_fixture_dates")]
SCHEDULER_URL = "/admin/scheduler/duework/"


def _row(key: str, *, held: bool = False, status: str = SchedulerStatus.PENDING) -> Any:
    now = timezone.now()
    return DueWorkFactory(
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
    audit = DueWorkTransition.objects.get(scheduler=row)
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
    assert DueWorkTransition.objects.filter(
        scheduler=waiting, reason_code="cancelled", detail="by support: duplicate subscription"
    ).exists()


def test_scheduler_object_page_is_read_only(support: Client) -> None:
    row = _row("report-subscription:r:manual:1")
    url = f"{SCHEDULER_URL}{row.pk}/change/"
    assert support.get(url).status_code == 200
    support.post(url, {"status": "completed", "scheduler_key": "x"})
    row.refresh_from_db()
    assert row.status == SchedulerStatus.PENDING and row.scheduler_key.endswith(":r:manual:1")
