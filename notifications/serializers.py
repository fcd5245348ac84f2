"""Inbox serializers (read-only: the user changes nothing but ``read_at``), support's
read-only view of notifications with their attempts and transitions, and external contacts
with their channel preferences: the rows as read and the input of each write (types and
shapes here; the destination checks and the preference rules are the services')."""

from __future__ import annotations

from typing import Any

from django.core.validators import EmailValidator, URLValidator
from rest_framework import serializers

from common.serializers import (
    FixedFieldsMixin,
    StrictBooleanField,
    StrictCharField,
    StrictModelSerializer,
    StrictPrimaryKeyRelatedField,
)
from common.tenancy import OrgScope
from devices.selectors import farms_visible
from notifications.destinations import validate_webhook_url
from notifications.models import (
    ChannelPreference,
    ExternalContact,
    InboxItem,
    Notification,
    NotificationAttempt,
    NotificationTransition,
)
from notifications.selectors import external_contacts_visible
from notifications.services.preferences import CONTACT_CHANNELS
from notifications.states import Channel


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


def _scope(serializer: serializers.BaseSerializer[Any]) -> OrgScope:
    scope: OrgScope = serializer.context.get("scope", frozenset())  # none: nothing resolves
    return scope


class ContactSerializer(serializers.ModelSerializer[ExternalContact]):
    """An external contact as read: never its webhook secret, only whether it has one."""

    has_webhook_secret = serializers.SerializerMethodField(
        help_text="a signing secret was issued (webhooks are sent only then)"
    )

    class Meta:
        model = ExternalContact
        fields: tuple[str, ...] = (
            "id",
            "farm",
            "name",
            "email",
            "webhook_url",
            "is_active",
            "has_webhook_secret",
            "created_at",
        )
        read_only_fields = fields

    def get_has_webhook_secret(self, contact: ExternalContact) -> bool:
        return bool(contact.webhook_secret_salt)


class ContactWithSecretSerializer(ContactSerializer):
    """The answer of a create or a secret rotation: the secret, this once."""

    webhook_secret = serializers.CharField(
        read_only=True,
        allow_null=True,
        help_text="The webhook signing secret, in this answer only (never stored, never "
        "shown again); null without a webhook URL, and in a replay by Idempotency-Key: "
        "rotate with POST .../rotate-secret/ for a new one.",
    )

    class Meta(ContactSerializer.Meta):
        fields = (*ContactSerializer.Meta.fields, "webhook_secret")
        read_only_fields = fields


def _email_field() -> StrictCharField:
    return StrictCharField(
        max_length=254, allow_blank=True, required=False, validators=[EmailValidator()]
    )


def _webhook_url_field() -> StrictCharField:
    return StrictCharField(
        max_length=500,
        allow_blank=True,
        required=False,
        validators=[URLValidator(schemes=["http", "https"]), validate_webhook_url],
        help_text="https URL of the receiver; a private or loopback address is refused "
        "unless listed in WEBHOOK_ALLOWED_NETWORKS",
    )


class ContactCreateSerializer(StrictModelSerializer[ExternalContact]):
    """A webhook URL gets a signing secret at once, shown in the answer only."""

    email = _email_field()
    webhook_url = _webhook_url_field()

    class Meta:
        model = ExternalContact
        fields = ("farm", "name", "email", "webhook_url")

    def get_fields(self) -> dict[str, Any]:
        fields: dict[str, Any] = super().get_fields()
        fields["farm"].queryset = farms_visible(scope=_scope(self))
        return fields


class ContactUpdateSerializer(FixedFieldsMixin, StrictModelSerializer[ExternalContact]):
    fixed_fields = {
        "farm": "a contact stays on its farm; add a new contact",
        "webhook_secret": "rotate with POST .../rotate-secret/",
    }

    email = _email_field()
    webhook_url = _webhook_url_field()

    class Meta:
        model = ExternalContact
        fields = ("name", "email", "webhook_url", "is_active")


class ChannelPreferenceSerializer(serializers.ModelSerializer[ChannelPreference]):
    # A plain string: "channel" names the notification's choice set elsewhere in the API.
    channel = serializers.CharField(read_only=True, help_text="email or webhook")

    class Meta:
        model = ChannelPreference
        fields = ("id", "contact", "channel", "enabled", "opted_out_at", "updated_at")
        read_only_fields = fields
        extra_kwargs = {
            "opted_out_at": {
                "help_text": "the recipient opted out: nothing is sent on the "
                "channel, whatever ``enabled`` says"
            },
        }


class ChannelPreferenceSetSerializer(serializers.Serializer[Any]):
    """Turn a channel on or off for a contact: the one row of (contact, channel), made or
    changed."""

    contact = StrictPrimaryKeyRelatedField(queryset=ExternalContact.objects.none())
    channel = serializers.ChoiceField(
        choices=[(c.value, c.label) for c in Channel if c in CONTACT_CHANNELS],
        help_text="email or webhook (the inbox is for users)",
    )
    enabled = StrictBooleanField()

    def get_fields(self) -> dict[str, Any]:
        fields: dict[str, Any] = super().get_fields()
        fields["contact"].queryset = external_contacts_visible(scope=_scope(self))
        return fields


class ChannelPreferenceUpdateSerializer(FixedFieldsMixin, serializers.Serializer[Any]):
    fixed_fields = {
        name: "set a preference for another contact or channel with POST"
        for name in ("contact", "channel")
    } | {"opted_out_at": "the recipient's own choice"}

    enabled = StrictBooleanField()
