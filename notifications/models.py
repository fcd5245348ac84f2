"""Notification tables: who may be told (memberships, external contacts, channel preferences)
and what was told (one Notification per source key, recipient and channel, its attempts, the
transitions support reads, and the in-app inbox)."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import Q

from common.models import Organization
from common.validators import validate_time_zone
from devices.models import Farm
from notifications.destinations import validate_webhook_url
from notifications.states import (
    AttemptOutcome,
    Channel,
    NotificationReason,
    NotificationStatus,
)

SOURCE_KEY_MAX_LENGTH = 400  # the scheduler key's own limit (scheduler.keys)
RECIPIENT_KEY_MAX_LENGTH = 64


class MembershipRole(models.TextChoices):
    OWNER = "owner"
    MANAGER = "manager"
    MEMBER = "member"
    VIEWER = "viewer"
    OPERATOR = "operator"  # told about platform trouble (dead letters)


class Membership(models.Model):
    """A user's role on one farm or on a whole organisation (exactly one of the two)."""

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="farm_memberships"
    )
    organization = models.ForeignKey(
        Organization, null=True, blank=True, on_delete=models.CASCADE, related_name="memberships"
    )
    farm = models.ForeignKey(
        Farm, null=True, blank=True, on_delete=models.CASCADE, related_name="memberships"
    )
    role = models.CharField(max_length=16, choices=MembershipRole.choices)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.CheckConstraint(
                condition=Q(organization__isnull=True, farm__isnull=False)
                | Q(organization__isnull=False, farm__isnull=True),
                name="membership_org_xor_farm",
            ),
            models.UniqueConstraint(
                fields=["user", "organization", "role"],
                condition=Q(organization__isnull=False),
                name="membership_once_per_org_role",
            ),
            models.UniqueConstraint(
                fields=["user", "farm", "role"],
                condition=Q(farm__isnull=False),
                name="membership_once_per_farm_role",
            ),
        ]

    def __str__(self) -> str:
        scope = f"farm:{self.farm_id}" if self.farm_id else f"org:{self.organization_id}"
        return f"user:{self.user_id} {self.role} {scope}"


class ExternalContact(models.Model):
    """Someone outside the product (a vet, a buyer, an integrator's endpoint) told about a
    farm by email and/or a signed webhook."""

    farm = models.ForeignKey(Farm, on_delete=models.CASCADE, related_name="external_contacts")
    name = models.CharField(max_length=200)
    email = models.EmailField(blank=True, default="")
    # Never inside (loopback, private, ...): checked here and again at every send.
    webhook_url = models.URLField(
        max_length=500, blank=True, default="", validators=[validate_webhook_url]
    )
    # What the webhook's signing secret derives from (notifications.webhook_secrets): the
    # secret itself is never stored. Empty salt: no secret issued, no webhook delivery.
    webhook_secret_salt = models.CharField(max_length=64, blank=True, default="", editable=False)
    webhook_secret_key_id = models.CharField(max_length=16, blank=True, default="", editable=False)
    is_active = models.BooleanField(default=True)
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return self.name


class ChannelPreference(models.Model):
    """One recipient's choice for one channel; no row means the channel's default (on)."""

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.CASCADE,
        related_name="notification_preferences",
    )
    contact = models.ForeignKey(
        ExternalContact,
        null=True,
        blank=True,
        on_delete=models.CASCADE,
        related_name="preferences",
    )
    channel = models.CharField(max_length=16, choices=Channel.choices)
    enabled = models.BooleanField(default=True)
    opted_out_at = models.DateTimeField(null=True, blank=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [
            models.CheckConstraint(
                condition=Q(user__isnull=True, contact__isnull=False)
                | Q(user__isnull=False, contact__isnull=True),
                name="preference_user_xor_contact",
            ),
            models.UniqueConstraint(
                fields=["user", "channel"],
                condition=Q(user__isnull=False),
                name="preference_once_per_user_channel",
            ),
            models.UniqueConstraint(
                fields=["contact", "channel"],
                condition=Q(contact__isnull=False),
                name="preference_once_per_contact_channel",
            ),
        ]

    def __str__(self) -> str:
        who = f"user:{self.user_id}" if self.user_id else f"contact:{self.contact_id}"
        return f"{who} {self.channel} {'on' if self.enabled else 'off'}"


class NotificationProfile(models.Model):
    """Per-farm rendering settings the devices app does not hold (the farm's locale)."""

    farm = models.OneToOneField(Farm, on_delete=models.CASCADE, related_name="notification_profile")
    locale = models.CharField(max_length=16, default="en")

    def __str__(self) -> str:
        return f"farm:{self.farm_id} {self.locale}"


class Notification(models.Model):
    """One message to one recipient on one channel for one source (a scheduler key, a dead
    letter). (source_key, recipient_key, channel) is unique: a re-run hand-off, a retried task
    or a replayed event finds the existing row and never sends twice."""

    source_key = models.CharField(max_length=SOURCE_KEY_MAX_LENGTH)
    recipient_key = models.CharField(max_length=RECIPIENT_KEY_MAX_LENGTH)  # user:12 / contact:5
    channel = models.CharField(max_length=16, choices=Channel.choices)
    farm = models.ForeignKey(
        Farm, null=True, blank=True, on_delete=models.PROTECT, related_name="notifications"
    )
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="notifications",
    )
    contact = models.ForeignKey(
        ExternalContact,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="notifications",
    )
    address = models.CharField(max_length=500, blank=True, default="")  # email or webhook URL
    recipient_policy = models.CharField(max_length=32, blank=True, default="")
    template_name = models.CharField(max_length=100)
    context = models.JSONField(default=dict)  # tagged JSON: datetimes and dates survive retries
    attachments = models.JSONField(default=list)
    locale = models.CharField(max_length=16, default="en")
    time_zone = models.CharField(max_length=64, default="UTC", validators=[validate_time_zone])
    status = models.CharField(
        max_length=16, choices=NotificationStatus.choices, default=NotificationStatus.QUEUED
    )
    status_reason = models.CharField(
        max_length=32, choices=NotificationReason.choices, default=NotificationReason.QUEUED
    )
    status_detail = models.CharField(max_length=500, blank=True, default="")
    attempt_count = models.PositiveIntegerField(default=0)
    max_attempts = models.PositiveIntegerField(default=5)
    next_attempt_at = models.DateTimeField(null=True, blank=True)
    lease_expires_at = models.DateTimeField(null=True, blank=True)
    version = models.PositiveIntegerField(default=0)
    subject = models.CharField(max_length=500, blank=True, default="")
    body = models.TextField(blank=True, default="")
    body_html = models.TextField(blank=True, default="")
    rendered_at = models.DateTimeField(null=True, blank=True)
    last_error = models.TextField(blank=True, default="")
    created_at = models.DateTimeField()
    updated_at = models.DateTimeField()
    sent_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["source_key", "recipient_key", "channel"], name="notification_once"
            )
        ]
        indexes = [
            # The sweep: due queued rows and expired leases, nothing else.
            models.Index(
                fields=["next_attempt_at"],
                condition=Q(status=NotificationStatus.QUEUED),
                name="notification_queued_due",
            ),
            models.Index(
                fields=["lease_expires_at"],
                condition=Q(status=NotificationStatus.SENDING),
                name="notification_sending_lease",
            ),
            models.Index(fields=["farm", "created_at"], name="notification_farm_created"),
            # The retention prune's oldest-first scan (common.retention).
            models.Index(fields=["created_at"], name="notification_created"),
        ]

    def __str__(self) -> str:
        return f"{self.source_key} {self.recipient_key} {self.channel} {self.status}"


class NotificationAttempt(models.Model):
    """One delivery attempt as it happened: what the channel answered and how long it took."""

    notification = models.ForeignKey(
        Notification, on_delete=models.CASCADE, related_name="attempts"
    )
    attempt = models.PositiveIntegerField()
    started_at = models.DateTimeField()
    latency_ms = models.PositiveIntegerField(default=0)
    status_code = models.PositiveIntegerField(null=True, blank=True)
    error = models.TextField(blank=True, default="")
    outcome = models.CharField(max_length=16, choices=AttemptOutcome.choices)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["notification", "attempt"], name="notification_attempt_once"
            )
        ]

    def __str__(self) -> str:
        return f"{self.notification_id}#{self.attempt} {self.outcome}"


class NotificationTransition(models.Model):
    """The audit row of every status change (who, why), written with the change itself."""

    notification = models.ForeignKey(
        Notification, on_delete=models.CASCADE, related_name="transitions"
    )
    from_status = models.CharField(max_length=16, blank=True, default="")
    to_status = models.CharField(max_length=16, choices=NotificationStatus.choices)
    reason = models.CharField(max_length=32, choices=NotificationReason.choices)
    detail = models.CharField(max_length=500, blank=True, default="")
    actor = models.CharField(max_length=150, blank=True, default="")
    attempt = models.PositiveIntegerField(default=0)
    at = models.DateTimeField()

    class Meta:
        indexes = [models.Index(fields=["notification", "at"])]

    def __str__(self) -> str:
        return f"{self.notification_id} {self.from_status}->{self.to_status} ({self.reason})"


class InboxItem(models.Model):
    """An in-app message a user lists and marks read; one per notification."""

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="inbox_items"
    )
    notification = models.OneToOneField(
        Notification, on_delete=models.CASCADE, related_name="inbox_item"
    )
    farm = models.ForeignKey(
        Farm, null=True, blank=True, on_delete=models.CASCADE, related_name="inbox_items"
    )
    subject = models.CharField(max_length=500)
    body = models.TextField()
    created_at = models.DateTimeField()
    read_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        indexes = [
            models.Index(fields=["user", "-created_at"], name="inbox_user_recent"),
        ]

    def __str__(self) -> str:
        return f"user:{self.user_id} {self.subject}"
