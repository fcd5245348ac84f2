"""A reminder setting, the occurrences it wants (each tied to one scheduler row) and a
threshold reminder's state."""

from __future__ import annotations

import uuid

from django.db import models
from django.db.models import Q

from common.localtime import LocalTimeRule
from common.models import Organization
from common.validators import (
    validate_json_bounds,
    validate_local_time,
)
from devices.models import Farm
from reminders.models.choices import (
    DocumentType,
    FiringPolicyChoice,
    RecipientsPolicy,
    ReminderTrigger,
    SourceType,
    ThresholdOperator,
    validate_offsets_days,
)


class ReminderSetting(models.Model):
    """How one farm (or every farm of an organisation) is reminded about one source type.
    Offsets, dates and thresholds shape occurrence identity; send time only the instant;
    template, channels and recipients are read at execution time."""

    guid = models.UUIDField(default=uuid.uuid4, unique=True, editable=False)
    organization = models.ForeignKey(
        Organization, on_delete=models.CASCADE, null=True, blank=True, related_name="+"
    )
    farm = models.ForeignKey(
        Farm, on_delete=models.CASCADE, null=True, blank=True, related_name="reminder_settings"
    )
    name = models.CharField(max_length=200)
    source_type = models.CharField(max_length=32, choices=SourceType.choices)
    trigger_type = models.CharField(max_length=24, choices=ReminderTrigger.choices)
    document_type = models.CharField(
        max_length=40, choices=DocumentType.choices, blank=True, default=""
    )  # documents only; blank: every type
    offsets_days = models.JSONField(  # date-based: days before
        default=list, blank=True, validators=[validate_json_bounds, validate_offsets_days]
    )
    send_time = models.TimeField(  # local time in the farm's zone
        null=True, blank=True, validators=[validate_local_time]
    )
    # Not indexed: settings are found by farm or organisation, never by their metric.
    threshold_metric = models.SlugField(max_length=60, blank=True, default="", db_index=False)
    threshold_operator = models.CharField(
        max_length=4, choices=ThresholdOperator.choices, blank=True, default=""
    )
    threshold_value = models.DecimalField(max_digits=16, decimal_places=4, null=True, blank=True)
    firing_policy = models.CharField(
        max_length=20, choices=FiringPolicyChoice.choices, blank=True, default=""
    )
    recipients_policy = models.CharField(
        max_length=24, choices=RecipientsPolicy.choices, default=RecipientsPolicy.FARM_MANAGERS
    )
    template_name = models.CharField(max_length=100)
    channels = models.JSONField(default=list, validators=[validate_json_bounds])
    active = models.BooleanField(default=True)
    revision = models.PositiveIntegerField(default=0)  # +1 per write: the event key
    created_at = models.DateTimeField()
    updated_at = models.DateTimeField()

    class Meta:
        constraints = [
            models.CheckConstraint(
                condition=Q(farm__isnull=False, organization__isnull=True)
                | Q(farm__isnull=True, organization__isnull=False),
                name="reminder_setting_farm_xor_org",
            )
        ]
        indexes = [
            models.Index(fields=["farm", "source_type"], name="reminder_setting_farm_idx"),
            models.Index(fields=["organization", "source_type"], name="reminder_setting_org_idx"),
        ]

    def __str__(self) -> str:
        return self.name


class ReminderOccurrence(models.Model):
    """Which (setting, source) wanted a scheduler row, and how its instant was derived. The
    status stays on the scheduler row; this row is the index the event path and
    reconciliation use to find old rows of a source or a setting."""

    scheduler_key = models.CharField(max_length=400)
    scheduler_id = models.BigIntegerField()
    setting = models.ForeignKey(ReminderSetting, on_delete=models.PROTECT, related_name="+")
    farm = models.ForeignKey(Farm, on_delete=models.CASCADE, related_name="+")
    source_type = models.CharField(max_length=32, choices=SourceType.choices)
    source_guid = models.UUIDField()
    trigger_type = models.CharField(max_length=24, choices=ReminderTrigger.choices)
    target_date = models.DateField(null=True, blank=True)
    offset_days = models.IntegerField(null=True, blank=True)
    threshold_key = models.CharField(max_length=200, blank=True, default="")
    scheduled_on = models.DateTimeField()
    scheduled_local_date = models.DateField(null=True, blank=True)
    local_time_rule = models.CharField(
        max_length=24, choices=LocalTimeRule.choices, default=LocalTimeRule.EXACT
    )
    created_at = models.DateTimeField()
    updated_at = models.DateTimeField()

    class Meta:
        # A constraint, not ``unique=True``: no pattern-ops copy of the index (keys are only
        # ever compared whole here).
        constraints = [
            models.UniqueConstraint(fields=["scheduler_key"], name="reminder_occurrence_key_once")
        ]
        indexes = [
            models.Index(fields=["source_type", "source_guid"], name="occurrence_source_idx"),
            models.Index(fields=["setting", "source_guid"], name="occurrence_setting_idx"),
            models.Index(fields=["farm", "scheduled_local_date"], name="occurrence_farm_date_idx"),
        ]

    def __str__(self) -> str:
        return self.scheduler_key


class ThresholdState(models.Model):
    """The last evaluation of one threshold (metric, value, policy) for one source under one
    setting: what FalseToTrue episodes and OncePerDay days are counted from."""

    setting = models.ForeignKey(ReminderSetting, on_delete=models.CASCADE, related_name="+")
    source_guid = models.UUIDField()
    threshold_base = models.CharField(max_length=160)  # {metricKey}:{value}:{firingPolicy}
    is_true = models.BooleanField(default=False)
    episode = models.PositiveIntegerField(default=0)  # false→true transitions seen
    scope_key = models.CharField(max_length=60, blank=True, default="")  # of the last candidate
    true_since = models.DateTimeField(null=True, blank=True)  # start of the current episode
    last_value = models.FloatField(null=True, blank=True)
    evaluated_at = models.DateTimeField()

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["setting", "source_guid", "threshold_base"], name="one_threshold_state"
            )
        ]

    def __str__(self) -> str:
        state = "true" if self.is_true else "false"
        at = f"{self.evaluated_at:%Y-%m-%d %H:%M:%S}"
        return f"{self.threshold_base} · setting {self.setting_id} {state} @ {at}"
