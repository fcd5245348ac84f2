"""Inbox serializers (read-only: the user changes nothing but ``read_at``) and support's
read-only view of notifications with their attempts and transitions."""

from __future__ import annotations

from typing import Any

from rest_framework import serializers

from common.serializers import StrictCharField
from notifications.models import (
    InboxItem,
    Notification,
    NotificationAttempt,
    NotificationTransition,
)


class InboxItemSerializer(serializers.ModelSerializer[InboxItem]):
    is_read = serializers.SerializerMethodField()

    class Meta:
        model = InboxItem
        fields = ["id", "subject", "body", "farm", "created_at", "read_at", "is_read"]
        read_only_fields = fields

    def get_is_read(self, item: InboxItem) -> bool:
        return item.read_at is not None

    def to_representation(self, instance: InboxItem) -> dict[str, Any]:
        return dict(super().to_representation(instance))


class NotificationAttemptSerializer(serializers.ModelSerializer[NotificationAttempt]):
    class Meta:
        model = NotificationAttempt
        fields = ["attempt", "started_at", "latency_ms", "status_code", "error", "outcome"]
        read_only_fields = fields


class NotificationTransitionSerializer(serializers.ModelSerializer[NotificationTransition]):
    # Plain strings: the same choice sets as the notification's own fields, which would give
    # the schema two enum names for one set.
    from_status = serializers.CharField(read_only=True)
    to_status = serializers.CharField(read_only=True)
    reason = serializers.CharField(read_only=True)

    class Meta:
        model = NotificationTransition
        fields = ["at", "from_status", "to_status", "reason", "detail", "actor", "attempt"]
        read_only_fields = fields


class NotificationSerializer(serializers.ModelSerializer[Notification]):
    """Support's view of a delivery; the render context and attachments stay server-side."""

    # Plain strings: "status" and "channel" name other choice sets elsewhere in the API, and
    # the schema would otherwise need enum name overrides in the settings.
    channel = serializers.CharField(read_only=True, help_text="email, webhook or inbox")
    status = serializers.CharField(
        read_only=True, help_text="queued, sending, sent, failed, cancelled or skipped"
    )
    status_reason = serializers.CharField(read_only=True, help_text="a reason code")

    class Meta:
        model = Notification
        fields = [
            "id",
            "source_key",
            "recipient_key",
            "channel",
            "farm",
            "user",
            "contact",
            "address",
            "template_name",
            "locale",
            "status",
            "status_reason",
            "status_detail",
            "attempt_count",
            "max_attempts",
            "next_attempt_at",
            "subject",
            "last_error",
            "created_at",
            "updated_at",
            "sent_at",
        ]
        read_only_fields = fields


class NotificationDetailSerializer(NotificationSerializer):
    """One notification with every attempt and status change (who moved it and why)."""

    attempts = NotificationAttemptSerializer(many=True, read_only=True)
    transitions = NotificationTransitionSerializer(many=True, read_only=True)

    class Meta(NotificationSerializer.Meta):
        fields = [*NotificationSerializer.Meta.fields, "body", "attempts", "transitions"]
        read_only_fields = fields


class NotificationActionSerializer(serializers.Serializer[Any]):
    """Why support retries or cancels: kept with the user name in the transition row."""

    reason = StrictCharField(max_length=400, allow_blank=False, trim_whitespace=True)
