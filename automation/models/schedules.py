"""A rule's schedules: local times in the farm's zone at which the rule fires (with its
conditions, if it has any). Each occurrence is one scheduler row, key
``rule-schedule:{ruleId}:{occurrenceUtc}`` (``scheduler.keys``), so a worker killed across it
or a redelivered task runs it once; one found later than ``max_lateness_s`` ends
``skipped``/``too_late`` instead of acting late."""

from __future__ import annotations

from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from django.db.models import Q

from automation.models.rules import AutomationRule
from common.validators import validate_local_time

EVERY_DAY = 0b1111111  # bit 0 is Monday, as date.weekday() counts


class AutomationRuleSchedule(models.Model):
    """At ``local_time`` on the weekdays in ``weekdays`` (a bit per day, Monday first)."""

    rule = models.ForeignKey(AutomationRule, on_delete=models.CASCADE, related_name="schedules")
    local_time = models.TimeField(validators=[validate_local_time])
    weekdays = models.PositiveSmallIntegerField(
        default=EVERY_DAY, validators=[MinValueValidator(1), MaxValueValidator(EVERY_DAY)]
    )
    max_lateness_s = models.PositiveIntegerField(
        default=900, validators=[MinValueValidator(1), MaxValueValidator(86400)]
    )
    is_active = models.BooleanField(default=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["rule", "local_time"], name="one_schedule_per_time"),
            models.CheckConstraint(
                condition=Q(weekdays__gte=1, weekdays__lte=EVERY_DAY), name="schedule_weekdays"
            ),
        ]

    def __str__(self) -> str:
        at = self.local_time.strftime("%H:%M") if self.local_time else "?"
        rule = self.rule.name if self.rule_id else "a rule"
        return f"{rule} at {at}"
