"""Rules: what a farm's automation decides. A rule fires on a reading of its trigger endpoint,
at a local time (``AutomationRuleSchedule``), or both; every condition must hold, each on a
reading fresher than ``condition_window_s``; it drives its target endpoint and each of its
further actions. ``priority`` settles decisions of several rules for one endpoint
(``automation.services.priority``)."""

from __future__ import annotations

from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from django.db.models import Q

from common.validators import validate_json_bounds
from devices.models import DeviceInstanceEndpoint, Farm

PRIORITY_MIN, PRIORITY_MAX = -1000, 1000
MAX_ON_MAX_S = 7 * 86400  # the longest run-time limit
MAX_ON_HELP = (
    "a run-time limit in seconds: this long after the command applied, one back to "
    "max_on_value (or the endpoint's safe value) follows; null: none"
)
MAX_ON_VALUE_HELP = "with max_on_s: the value to return to; null: the endpoint's safe value"


class Operator(models.TextChoices):
    GT = "gt"
    GTE = "gte"
    LT = "lt"
    LTE = "lte"
    EQ = "eq"
    NEQ = "neq"
    BETWEEN = "between"
    OUTSIDE = "outside"
    # A watchdog: no reading of the endpoint for ``threshold_value`` seconds
    # (``automation.services.watchdog``); it never matches a reading.
    SILENT_FOR = "silent_for"


class AutomationRule(models.Model):
    """When every condition holds (the trigger endpoint's value satisfies the operator, and
    each further condition its own), drive the target endpoint and the further actions' ones.

    A rule without a trigger endpoint fires only on its schedules. A deleted rule
    (``deleted_at``) is kept, inactive, as the subject of its history."""

    farm = models.ForeignKey(Farm, on_delete=models.CASCADE, related_name="rules")
    name = models.CharField(max_length=200)
    trigger_endpoint = models.ForeignKey(
        DeviceInstanceEndpoint,
        on_delete=models.PROTECT,
        null=True,
        blank=True,
        related_name="triggering_rules",
    )
    operator = models.CharField(max_length=16, choices=Operator.choices, blank=True, default="")
    threshold_value = models.JSONField(null=True, blank=True, validators=[validate_json_bounds])
    threshold_value_high = models.JSONField(
        null=True, blank=True, validators=[validate_json_bounds]
    )
    target_endpoint = models.ForeignKey(
        DeviceInstanceEndpoint, on_delete=models.PROTECT, related_name="targeting_rules"
    )
    target_value = models.JSONField(validators=[validate_json_bounds])
    # A run-time limit on the action's command (``automation.services.run_limits``).
    max_on_s = models.PositiveIntegerField(
        null=True,
        blank=True,
        validators=[MinValueValidator(1), MaxValueValidator(MAX_ON_MAX_S)],
        help_text=MAX_ON_HELP,
    )
    max_on_value = models.JSONField(
        null=True, blank=True, validators=[validate_json_bounds], help_text=MAX_ON_VALUE_HELP
    )
    # Higher wins when rules decide for one endpoint at once; a manual command outranks all.
    priority = models.SmallIntegerField(
        default=0, validators=[MinValueValidator(PRIORITY_MIN), MaxValueValidator(PRIORITY_MAX)]
    )
    # A further condition holds only on a reading of its endpoint at most this old.
    condition_window_s = models.PositiveIntegerField(
        default=600, validators=[MinValueValidator(1), MaxValueValidator(7 * 86400)]
    )
    # An alarm severity (``alarms.states.AlarmSeverity``), or blank: when set, the rule raises a
    # ``rule_alarm`` alarm as it fires and clears it when its condition is false again; a
    # watchdog raises its ``watchdog`` alarm at this severity (major when blank).
    alarm_severity = models.CharField(max_length=16, blank=True, default="")
    is_active = models.BooleanField(default=True)
    # Deleted (``rule_delete``): inactive for good and hidden from the API; its executions,
    # commands and their audit rows keep pointing at it. Who deleted it is its audit.
    deleted_at = models.DateTimeField(null=True, blank=True)
    deleted_by = models.CharField(max_length=150, blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        verbose_name = "rule"
        indexes = [
            models.Index(fields=["trigger_endpoint", "is_active"]),
            # The watchdog sweep and the watchdog holds of a decision: active watchdogs only.
            models.Index(
                fields=["trigger_endpoint"],
                condition=Q(operator=Operator.SILENT_FOR, is_active=True),
                name="rule_watchdogs_active",
            ),
        ]
        constraints = [
            # A deleted rule is never active again, whoever writes the row.
            models.CheckConstraint(
                condition=Q(deleted_at__isnull=True) | Q(is_active=False),
                name="deleted_rule_inactive",
            ),
            models.CheckConstraint(
                condition=Q(priority__gte=PRIORITY_MIN, priority__lte=PRIORITY_MAX),
                name="rule_priority_in_range",
            ),
            # A trigger endpoint comes with its operator; a schedule-only rule has neither.
            models.CheckConstraint(
                condition=Q(trigger_endpoint__isnull=True, operator="")
                | Q(trigger_endpoint__isnull=False, threshold_value__isnull=False)
                & ~Q(operator=""),
                name="rule_trigger_has_operator",
            ),
        ]

    def __str__(self) -> str:
        return self.name


class AutomationRuleCondition(models.Model):
    """A further condition of a rule, on another endpoint: all of a rule's conditions must
    hold for it to act, and a reading of any of them makes it evaluate."""

    rule = models.ForeignKey(AutomationRule, on_delete=models.CASCADE, related_name="conditions")
    endpoint = models.ForeignKey(
        DeviceInstanceEndpoint, on_delete=models.PROTECT, related_name="conditioning_rules"
    )
    operator = models.CharField(max_length=16, choices=Operator.choices)
    threshold_value = models.JSONField(validators=[validate_json_bounds])
    threshold_value_high = models.JSONField(
        null=True, blank=True, validators=[validate_json_bounds]
    )

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["rule", "endpoint"], name="one_condition_per_endpoint")
        ]

    def __str__(self) -> str:
        return f"{self.endpoint} {self.operator} {self.threshold_value}"


class AutomationRuleAction(models.Model):
    """A further action of a rule: each becomes its own decision and command, with its own
    gates, on its own endpoint."""

    rule = models.ForeignKey(AutomationRule, on_delete=models.CASCADE, related_name="actions")
    target_endpoint = models.ForeignKey(
        DeviceInstanceEndpoint, on_delete=models.PROTECT, related_name="acting_rules"
    )
    target_value = models.JSONField(validators=[validate_json_bounds])
    # A run-time limit on the action's command (``automation.services.run_limits``).
    max_on_s = models.PositiveIntegerField(
        null=True,
        blank=True,
        validators=[MinValueValidator(1), MaxValueValidator(MAX_ON_MAX_S)],
        help_text=MAX_ON_HELP,
    )
    max_on_value = models.JSONField(
        null=True, blank=True, validators=[validate_json_bounds], help_text=MAX_ON_VALUE_HELP
    )

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["rule", "target_endpoint"], name="one_action_per_endpoint"
            )
        ]

    def __str__(self) -> str:
        return f"{self.target_endpoint} → {self.target_value}"
