"""The due-work handler of rule schedules, registered at app start like the reminders' ones:
it reloads the rule at due time and decides the occurrence on the rules' decision path."""

from __future__ import annotations

from automation.services.rule_schedules import rule_occurrence_resolve, rule_occurrence_run
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


def scheduler_handlers_register() -> None:
    """Register once per process (a second call is a no-op)."""
    handler = RuleScheduleSchedulerHandler()
    if type(scheduler_handler_for(AutomationType.RULE_SCHEDULE)) is not type(handler):
        scheduler_handler_register(AutomationType.RULE_SCHEDULE, handler)
