"""Reminder sources, settings and report subscriptions (docs/spec.md §5).

Tables hold configuration and the identities keys are built from; the due work itself lives in
``automation.AutomationScheduler``. ``ReminderOccurrence`` links each scheduler row back to the
(setting, source) that wanted it, so "deactivate old rows first" finds them by source or
setting without scanning the scheduler table.
"""

from __future__ import annotations

import uuid
from typing import Any

from django.core.exceptions import ValidationError
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from django.db.models import Q

from common.localtime import LocalTimeRule
from common.models import Organization
from common.validators import (
    validate_date_bounds,
    validate_json_bounds,
    validate_local_time,
)
from devices.models import Device, DeviceInstanceEndpoint, Farm

# Date-based reminders are "before and on expiry": 0 is the day itself, the largest offset is
# ten years ahead. A setting holds at most this many offsets.
OFFSET_DAYS_MAX = 3650
OFFSETS_MAX = 20
# A metric's window reaches back at most a month (the metric reads its values at every event).
METRIC_WINDOW_MAX_MINUTES = 31 * 24 * 60


def offsets_days_problem(offsets: Any) -> str | None:
    """What is wrong with a setting's ``offsets_days`` (None: nothing); the model validator,
    the serializer and the settings service all ask here."""
    if not isinstance(offsets, list):
        return "offsets must be a list of whole days"
    if len(offsets) > OFFSETS_MAX:
        return f"at most {OFFSETS_MAX} offsets"
    if any(isinstance(o, bool) or not isinstance(o, int) for o in offsets):
        return "offsets are whole days"
    if any(not 0 <= o <= OFFSET_DAYS_MAX for o in offsets):
        return f"offsets are days before the expiry, from 0 (on the day) to {OFFSET_DAYS_MAX}"
    return None


def validate_offsets_days(offsets: Any) -> None:
    problem = offsets_days_problem(offsets)
    if problem is not None:
        raise ValidationError(problem, code="invalid_offsets")


class SourceType(models.TextChoices):
    """A reminder source type; each has one provider set (reminders.providers)."""

    DOCUMENT = "document"
    ENDPOINT_METRIC = "endpoint_metric"


class ReminderTrigger(models.TextChoices):
    """The trigger types a reminder setting may use (a subset of automation's TriggerType)."""

    DATE_BASED = "date_based"
    THRESHOLD_CONDITION = "threshold_condition"


class DocumentSubject(models.TextChoices):
    FARM = "farm"
    DEVICE = "device"
    WORKER = "worker"


class DocumentType(models.TextChoices):
    CALIBRATION_CERTIFICATE = "calibration_certificate"
    POLICE_VETTING = "police_vetting"
    FIRST_AID_CERTIFICATE = "first_aid_certificate"
    INSURANCE = "insurance"


class MetricAggregate(models.TextChoices):
    LATEST = "latest"
    MAX = "max"
    MIN = "min"
    AVG = "avg"


class ThresholdOperator(models.TextChoices):
    GTE = "gte"
    GT = "gt"
    LTE = "lte"
    LT = "lt"


class FiringPolicyChoice(models.TextChoices):
    """Values of ``scheduler.keys.FiringPolicy`` (part of every threshold key)."""

    ONCE_PER_SOURCE = "OncePerSource"
    ONCE_PER_THRESHOLD = "OncePerThreshold"
    ONCE_PER_DAY = "OncePerDay"
    FALSE_TO_TRUE = "FalseToTrue"


class RecipientsPolicy(models.TextChoices):
    """Resolved by the notification pipeline at execution time, never stored on a row."""

    FARM_MEMBERS = "farm_members"
    FARM_MANAGERS = "farm_managers"
    EXTERNAL_CONTACTS = "external_contacts"
    EVERYONE = "everyone"


class Recurrence(models.TextChoices):
    DAILY = "daily"
    WEEKLY = "weekly"
    MONTHLY = "monthly"


class Document(models.Model):
    """A dated document with an expiry: the ``document`` reminder source."""

    guid = models.UUIDField(default=uuid.uuid4, unique=True, editable=False)
    farm = models.ForeignKey(Farm, on_delete=models.CASCADE, related_name="documents")
    subject_kind = models.CharField(max_length=16, choices=DocumentSubject.choices)
    device = models.ForeignKey(
        Device, on_delete=models.CASCADE, null=True, blank=True, related_name="documents"
    )
    worker_name = models.CharField(max_length=200, blank=True, default="")
    document_type = models.CharField(max_length=40, choices=DocumentType.choices)
    title = models.CharField(max_length=200)
    # The farm's calendar; None: never.
    expires_on = models.DateField(null=True, blank=True, validators=[validate_date_bounds])
    active = models.BooleanField(default=True)
    revision = models.PositiveIntegerField(default=0)  # +1 per write: the event key
    created_at = models.DateTimeField()
    updated_at = models.DateTimeField()

    class Meta:
        indexes = [
            # Reconciliation: changed since the watermark, in cursor order.
            models.Index(fields=["updated_at", "id"], name="document_changed_idx"),
            # Reconciliation: expiries whose occurrences fall in the due window.
            models.Index(fields=["farm", "expires_on"], name="document_expiry_idx"),
        ]
        constraints = [
            models.CheckConstraint(
                condition=~Q(subject_kind=DocumentSubject.DEVICE) | Q(device__isnull=False),
                name="document_device_subject_has_device",
            ),
            models.CheckConstraint(
                condition=~Q(subject_kind=DocumentSubject.WORKER) | ~Q(worker_name=""),
                name="document_worker_subject_has_name",
            ),
        ]

    def __str__(self) -> str:
        return self.title


class EndpointMetricSource(models.Model):
    """A metric over one endpoint's recent values: the ``endpoint_metric`` reminder source.
    ``metric_key`` names it (e.g. ``silo_level``); settings select sources by it."""

    guid = models.UUIDField(default=uuid.uuid4, unique=True, editable=False)
    farm = models.ForeignKey(Farm, on_delete=models.CASCADE, related_name="metric_sources")
    endpoint = models.ForeignKey(
        DeviceInstanceEndpoint, on_delete=models.CASCADE, related_name="metric_sources"
    )
    metric_key = models.SlugField(max_length=60, db_index=False)  # indexed in Meta
    aggregate = models.CharField(max_length=8, choices=MetricAggregate.choices)
    window_minutes = models.PositiveIntegerField(
        default=60,
        validators=[MinValueValidator(1), MaxValueValidator(METRIC_WINDOW_MAX_MINUTES)],
    )
    active = models.BooleanField(default=True)
    revision = models.PositiveIntegerField(default=0)  # +1 per write: the event key
    created_at = models.DateTimeField()
    updated_at = models.DateTimeField()

    class Meta:
        indexes = [
            models.Index(fields=["updated_at", "id"], name="metric_source_changed_idx"),
            # Settings select sources by equality; a plain index (a SlugField's own index
            # would add a pattern-ops copy for LIKE that nothing runs).
            models.Index(fields=["metric_key"], name="metric_source_key_idx"),
        ]

    def __str__(self) -> str:
        return f"{self.metric_key}@{self.endpoint_id}"


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


class ReportSubscription(models.Model):
    """A farm's automation summary, delivered every period of its recurrence (farm zone)."""

    guid = models.UUIDField(default=uuid.uuid4, unique=True, editable=False)
    farm = models.ForeignKey(Farm, on_delete=models.CASCADE, related_name="report_subscriptions")
    name = models.CharField(max_length=200)
    recurrence = models.CharField(max_length=8, choices=Recurrence.choices)
    # Local, on the day after the period ends.
    send_time = models.TimeField(validators=[validate_local_time])
    recipients_policy = models.CharField(
        max_length=24, choices=RecipientsPolicy.choices, default=RecipientsPolicy.FARM_MANAGERS
    )
    template_name = models.CharField(max_length=100, default="farm_report")
    channels = models.JSONField(default=list, validators=[validate_json_bounds])
    active = models.BooleanField(default=True)
    created_at = models.DateTimeField()
    updated_at = models.DateTimeField()

    def __str__(self) -> str:
        return self.name


class ReportManualRun(models.Model):
    """A manual run: its GUID is generated by the caller before asking, so a retried request
    lands on the same scheduler key."""

    guid = models.UUIDField(unique=True)
    subscription = models.ForeignKey(
        ReportSubscription, on_delete=models.CASCADE, related_name="manual_runs"
    )
    period_start = models.DateField()  # local, inclusive
    period_end = models.DateField()  # local, exclusive
    requested_at = models.DateTimeField()

    def __str__(self) -> str:
        period = f"{self.period_start:%Y-%m-%d}..{self.period_end:%Y-%m-%d}"
        return f"manual run {self.guid} of subscription {self.subscription_id} ({period})"


class ReconciliationWatermark(models.Model):
    """Where a provider's bounded reconciliation stands for one farm scope. The changed scan
    visits sources in (updated_at, id) order after (``changed_since``, ``cursor_id``); the
    window scan walks sources with occurrences in the due window by id after
    ``window_cursor_id`` and starts over when it reaches the end."""

    provider = models.CharField(max_length=32)
    scope = models.CharField(max_length=200)  # "all" or the sorted farm allowlist
    changed_since = models.DateTimeField()
    cursor_id = models.BigIntegerField(default=0)
    window_cursor_id = models.BigIntegerField(default=0)
    last_run_at = models.DateTimeField(null=True, blank=True)
    last_repaired = models.PositiveIntegerField(default=0)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["provider", "scope"], name="one_watermark_per_scope")
        ]

    def __str__(self) -> str:
        return f"{self.provider} · {self.scope} since {self.changed_since:%Y-%m-%d %H:%M:%S}"


# Users' scheduled messages (their own module: this one is past the size of one module).
from reminders.models.user_messages import (  # noqa: E402
    UserMessage as UserMessage,
)
from reminders.models.user_messages import (  # noqa: E402
    UserMessageOccurrence as UserMessageOccurrence,
)
from reminders.models.user_messages import (  # noqa: E402
    UserMessageRecurrence as UserMessageRecurrence,
)
from reminders.models.user_messages import (  # noqa: E402
    UserMessageStatus as UserMessageStatus,
)
