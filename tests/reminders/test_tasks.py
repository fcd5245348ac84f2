"""The reminders' Celery tasks are routed to the scheduler stage, named by beat, and each
runs one service: a reconciliation pass per provider, report periods."""

from __future__ import annotations

from datetime import date, timedelta

import pytest

from config.beat import beat_schedule
from config.celery import TASK_ROUTES
from config.celery import app as celery_app
from reminders.scheduler_handlers import (
    ReminderSchedulerHandler,
    ReportSchedulerHandler,
    UserMessageSchedulerHandler,
)
from reminders.tasks import reminders_reconcile_task, report_subscriptions_ensure_task
from scheduler.models import AutomationType
from scheduler.registry import scheduler_handler_for
from tests.reminders.conftest import NOW, date_setting, document, rows_of
from tests.reminders.test_reports import subscribe

TASKS = (
    "reminders.reconcile",
    "reminders.report_subscriptions_ensure",
    "reminders.endpoint_metrics_touched",
)


def test_tasks_are_registered_routed_and_scheduled() -> None:
    celery_app.loader.import_default_modules()
    for name in TASKS:
        assert name in celery_app.tasks
        assert TASK_ROUTES[name] == "scheduler"
    scheduled = {entry.task: entry.every_s for entry in beat_schedule().values()}
    assert scheduled["reminders.reconcile"] == 900.0  # low frequency
    assert "reminders.report_subscriptions_ensure" in scheduled


def test_the_scheduler_handlers_are_registered_at_app_start() -> None:
    assert isinstance(scheduler_handler_for(AutomationType.REMINDER), ReminderSchedulerHandler)
    assert isinstance(
        scheduler_handler_for(AutomationType.REPORT_SUBSCRIPTION), ReportSchedulerHandler
    )
    assert isinstance(
        scheduler_handler_for(AutomationType.USER_MESSAGE), UserMessageSchedulerHandler
    )


@pytest.mark.django_db
def test_the_tasks_run_their_services(farm, time_machine) -> None:
    date_setting(farm, offsets_days=[3])
    doc = document(farm, date(2026, 3, 6))  # its event is lost: reconciliation repairs it
    subscribe(farm)
    time_machine.move_to(NOW + timedelta(minutes=5), tick=False)
    assert reminders_reconcile_task.apply().get() == 1
    assert [r.tail for r in rows_of(doc.guid)] == ["expiry:2026-03-06:3"]
    assert report_subscriptions_ensure_task.apply().get() == 1
