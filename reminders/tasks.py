"""Celery tasks of reminders (queue ``scheduler``): take ids, call one service. Beat drives
the low-frequency reconciliation and the report periods (config.beat)."""

from __future__ import annotations

from celery import shared_task
from django.utils import timezone

from config.celery import DB_RETRY, routed_to
from config.task_names import (
    METRICS_TOUCHED,
    REMINDERS_RECONCILE,
    REPORT_SUBSCRIPTIONS_ENSURE,
    USER_MESSAGES_ENSURE,
)
from reminders.services.handlers import (
    endpoint_metrics_touched,
)
from reminders.services.reconcile import reminders_reconcile
from reminders.services.reports.subscriptions import report_subscriptions_ensure_due
from reminders.services.user_messages import user_messages_ensure_due


@shared_task(name=REMINDERS_RECONCILE, **routed_to("scheduler"), **DB_RETRY)
def reminders_reconcile_task(provider: str | None = None) -> int:
    """One bounded pass per provider (or of ``provider``); how many rows it repaired."""
    return reminders_reconcile(provider=provider, now=timezone.now())


@shared_task(name=REPORT_SUBSCRIPTIONS_ENSURE, **routed_to("scheduler"), **DB_RETRY)
def report_subscriptions_ensure_task() -> int:
    """Make sure every active subscription has the row of its current period."""
    return report_subscriptions_ensure_due(now=timezone.now())


@shared_task(name=METRICS_TOUCHED, **routed_to("scheduler"), **DB_RETRY)
def endpoint_metrics_touched_task(endpoint_ids: list[int]) -> int:
    """New telemetry arrived for these endpoints: evaluate the metric sources over them."""
    return endpoint_metrics_touched(endpoint_ids=endpoint_ids, now=timezone.now())


@shared_task(name=USER_MESSAGES_ENSURE, **routed_to("scheduler"), **DB_RETRY)
def user_messages_ensure_task() -> int:
    """Extend every live user message's scheduler rows to the horizon."""
    return user_messages_ensure_due(now=timezone.now())
