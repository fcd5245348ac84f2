"""What reminders are made of: their kinds, triggers, policies, and the bounds of a
setting's offsets (one check for the model, the serializer and the settings service)."""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ValidationError
from django.db import models

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
    """A reminder source type; each has one provider (reminders.providers)."""

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
