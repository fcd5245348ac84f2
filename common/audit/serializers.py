"""An audit entry as the API shows it: what changed (the row by its content type and id),
how, by whom, through which surface, and each changed field's value before and after (a
secret's as a mask)."""

from __future__ import annotations

from typing import Any

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from common.audit.models import AuditEntry

ACTIONS = {value: str(label) for value, label in AuditEntry.Action.choices}


class AuditEntrySerializer(serializers.ModelSerializer[AuditEntry]):
    object_type = serializers.SerializerMethodField(
        help_text="The changed row's model, ``app_label.model`` (``devices.farm``)"
    )
    action = serializers.SerializerMethodField(help_text="create, update or delete")
    actor = serializers.SerializerMethodField(
        help_text="The user name of who made the change; null for a command or the system"
    )
    changes = serializers.SerializerMethodField(
        help_text="Each changed field: [before, after], as text; a secret shows as a mask"
    )

    class Meta:
        model = AuditEntry
        fields = (
            "id",
            "timestamp",
            "object_type",
            "object_pk",
            "object_repr",
            "action",
            "actor",
            "surface",
            "organization_id",
            "changes",
            "additional_data",
        )
        read_only_fields = fields

    def get_object_type(self, entry: AuditEntry) -> str:
        content_type = entry.content_type
        return f"{content_type.app_label}.{content_type.model}"

    def get_action(self, entry: AuditEntry) -> str:
        return ACTIONS.get(entry.action, str(entry.action))

    def get_actor(self, entry: AuditEntry) -> str | None:
        return None if entry.actor is None else entry.actor.get_username()

    @extend_schema_field(OpenApiTypes.OBJECT)
    def get_changes(self, entry: AuditEntry) -> dict[str, Any]:
        found: dict[str, Any] = entry.changes or {}
        return found
