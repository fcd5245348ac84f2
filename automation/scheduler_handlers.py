"""The due-work handlers of rule schedules and of run-time limits, registered at app start like
the reminders' ones: each reloads its source at due time (the rule, the limited command) and
decides on the commands' own path."""

from __future__ import annotations

from automation.services.rule_schedules import rule_occurrence_resolve, rule_occurrence_run
from automation.services.run_limit_due import run_limit_resolve, run_limit_run
from automation.services.watchdog_due import watchdog_silence_resolve, watchdog_silence_run
from scheduler.models import AutomationType
from scheduler.registry import (
    HandlerResult,
    SchedulerJob,
    scheduler_handler_for,
    scheduler_handler_register,
)


class RuleScheduleSchedulerHandler:
    def revalidate(self, job: SchedulerJob) -> None:
        rule_occurrence_resolve(job)

    def run(self, job: SchedulerJob) -> HandlerResult:
        return rule_occurrence_run(job)


class RunLimitSchedulerHandler:
    def revalidate(self, job: SchedulerJob) -> None:
        run_limit_resolve(job)

    def run(self, job: SchedulerJob) -> HandlerResult:
        return run_limit_run(job)


class WatchdogSchedulerHandler:
    """A watchdog's silence: reloads the rule and its endpoint's last reading at due time."""

    def revalidate(self, job: SchedulerJob) -> None:
        watchdog_silence_resolve(job)

    def run(self, job: SchedulerJob) -> HandlerResult:
        return watchdog_silence_run(job)


def scheduler_handlers_register() -> None:
    """Register once per process (a second call is a no-op)."""
    handler = RuleScheduleSchedulerHandler()
    if type(scheduler_handler_for(AutomationType.RULE_SCHEDULE)) is not type(handler):
        scheduler_handler_register(AutomationType.RULE_SCHEDULE, handler)
    watchdog = WatchdogSchedulerHandler()
    if type(scheduler_handler_for(AutomationType.WATCHDOG)) is not type(watchdog):
        scheduler_handler_register(AutomationType.WATCHDOG, watchdog)
    run_limit = RunLimitSchedulerHandler()
    if type(scheduler_handler_for(AutomationType.RUN_LIMIT)) is not type(run_limit):
        scheduler_handler_register(AutomationType.RUN_LIMIT, run_limit)
