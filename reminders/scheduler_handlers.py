"""The due-work handlers of reminders and report subscriptions, registered per AutomationType
at app start. Each reloads and revalidates at due time, then queues the notification keyed by
the row's SchedulerKey; outcomes are the scheduler's typed exceptions."""

from __future__ import annotations

from collections.abc import Sequence

from reminders.services.execution import (
    reminder_due_batch,
    reminder_due_resolve,
    reminder_due_run,
)
from reminders.services.reports.run import report_due_batch, report_due_resolve, report_due_run
from reminders.services.user_messages.due import user_message_due_resolve, user_message_due_run
from scheduler.models import AutomationType
from scheduler.registry import (
    BatchResults,
    HandlerResult,
    SchedulerJob,
    scheduler_handler_for,
    scheduler_handler_register,
)


class ReminderSchedulerHandler:
    def revalidate(self, job: SchedulerJob) -> None:
        reminder_due_resolve(job)

    def run(self, job: SchedulerJob) -> HandlerResult:
        return reminder_due_run(job)

    def run_batch(self, jobs: Sequence[SchedulerJob]) -> BatchResults:
        return reminder_due_batch(jobs)


class UserMessageSchedulerHandler:
    """Users' scheduled messages: the message is reloaded at due time (its text may have
    changed since the row was made)."""

    def revalidate(self, job: SchedulerJob) -> None:
        user_message_due_resolve(job)

    def run(self, job: SchedulerJob) -> HandlerResult:
        return user_message_due_run(job)


class ReportSchedulerHandler:
    def revalidate(self, job: SchedulerJob) -> None:
        report_due_resolve(job)

    def run(self, job: SchedulerJob) -> HandlerResult:
        return report_due_run(job)

    def run_batch(self, jobs: Sequence[SchedulerJob]) -> BatchResults:
        return report_due_batch(jobs)


def scheduler_handlers_register() -> None:
    """Register the handlers once per process (a second call is a no-op)."""
    for automation_type, handler in (
        (AutomationType.REMINDER, ReminderSchedulerHandler()),
        (AutomationType.REPORT_SUBSCRIPTION, ReportSchedulerHandler()),
        (AutomationType.USER_MESSAGE, UserMessageSchedulerHandler()),
    ):
        if type(scheduler_handler_for(automation_type)) is not type(handler):
            scheduler_handler_register(automation_type, handler)
