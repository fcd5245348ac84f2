"""A user's scheduled message to a farm's people: once at a local time, or daily / weekly at a
local time, bounded by a last date or a number of occurrences, in the farm's zone. Each
occurrence is one scheduler row; ``UserMessageOccurrence`` ties the row to the occurrence's
sequence number, so an edited time moves the same occurrence and never sends one twice."""

from __future__ import annotations

import uuid

from django.conf import settings
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from django.db.models import Q

from common.localtime import LocalTimeRule
from common.validators import validate_date_bounds, validate_json_bounds, validate_local_time
from devices.models import Farm
from notifications.models import ExternalContact

# A message's occurrences, whatever bounds them: a daily message runs about three years.
USER_MESSAGE_OCCURRENCES_MAX = 1000
USER_MESSAGE_SUBJECT_MAX = 200
USER_MESSAGE_TEXT_MAX = 5000


class UserMessageRecurrence(models.TextChoices):
    ONCE = "once"
    DAILY = "daily"
    WEEKLY = "weekly"  # on the weekday of ``starts_on``


class UserMessageStatus(models.TextChoices):
    ACTIVE = "active"
    CANCELLED = "cancelled"


class UserMessageRecipients(models.TextChoices):
    """A policy of the notification pipeline (resolved at due time), or ``chosen``: the users
    and contacts named on the message, still members or contacts of the farm at due time."""

    FARM_MEMBERS = "farm_members"
    FARM_MANAGERS = "farm_managers"
    EXTERNAL_CONTACTS = "external_contacts"
    EVERYONE = "everyone"
    CHOSEN = "chosen"


class UserMessage(models.Model):
    """What to say, to whom and when. Subject, text, recipients and channels are read when an
    occurrence runs; the schedule fields decide the occurrences' instants."""

    guid = models.UUIDField(default=uuid.uuid4, unique=True, editable=False)
    farm = models.ForeignKey(Farm, on_delete=models.CASCADE, related_name="user_messages")
    author = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="user_messages_written",
    )
    subject = models.CharField(max_length=USER_MESSAGE_SUBJECT_MAX)
    text = models.TextField(max_length=USER_MESSAGE_TEXT_MAX)
    recipients_policy = models.CharField(
        max_length=24,
        choices=UserMessageRecipients.choices,
        default=UserMessageRecipients.FARM_MEMBERS,
    )
    recipient_users = models.ManyToManyField(
        settings.AUTH_USER_MODEL, blank=True, related_name="user_messages_received"
    )
    recipient_contacts = models.ManyToManyField(
        ExternalContact, blank=True, related_name="user_messages"
    )
    channels = models.JSONField(default=list, validators=[validate_json_bounds])
    recurrence = models.CharField(
        max_length=8, choices=UserMessageRecurrence.choices, default=UserMessageRecurrence.ONCE
    )
    # Local, in the farm's zone: the (first) occurrence's date and every occurrence's time.
    starts_on = models.DateField(validators=[validate_date_bounds])
    send_time = models.TimeField(validators=[validate_local_time])
    until = models.DateField(null=True, blank=True, validators=[validate_date_bounds])
    count = models.PositiveIntegerField(
        null=True,
        blank=True,
        validators=[MinValueValidator(1), MaxValueValidator(USER_MESSAGE_OCCURRENCES_MAX)],
    )
    status = models.CharField(
        max_length=12, choices=UserMessageStatus.choices, default=UserMessageStatus.ACTIVE
    )
    version = models.PositiveIntegerField(default=0)
    # Occurrences before this instant were never wanted (created, or the time last edited).
    schedule_changed_at = models.DateTimeField()
    last_occurrence_on = models.DateTimeField()  # UTC: the beat ensures until it has passed
    created_at = models.DateTimeField()
    updated_at = models.DateTimeField()
    cancelled_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        indexes = [
            # Beat's ensure: active messages with occurrences left, in id order.
            models.Index(
                fields=["last_occurrence_on", "id"],
                name="user_message_live_idx",
                condition=Q(status="active"),
            ),
            models.Index(fields=["farm", "status"], name="user_message_farm_idx"),
        ]

    def __str__(self) -> str:
        return self.subject


class UserMessageOccurrence(models.Model):
    """Occurrence ``sequence`` (0 is the first) of a message and the scheduler row that carries
    it. The row's key follows the occurrence's instant; this link keeps its identity."""

    message = models.ForeignKey(UserMessage, on_delete=models.CASCADE, related_name="occurrences")
    sequence = models.PositiveIntegerField()
    scheduler_id = models.BigIntegerField()
    scheduler_key = models.CharField(max_length=400)
    scheduled_on = models.DateTimeField()
    local_date = models.DateField()
    local_time_rule = models.CharField(
        max_length=24, choices=LocalTimeRule.choices, default=LocalTimeRule.EXACT
    )
    created_at = models.DateTimeField()
    updated_at = models.DateTimeField()

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["message", "sequence"], name="user_message_occurrence_once"
            ),
            # Not ``unique=True``: that adds a pattern-ops copy of the index nothing reads.
            models.UniqueConstraint(
                fields=["scheduler_key"], name="user_message_occurrence_key_once"
            ),
        ]

    def __str__(self) -> str:
        return self.scheduler_key
