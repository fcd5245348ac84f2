"""Inbox serializers (read-only: the user changes nothing but ``read_at``)."""

from __future__ import annotations

from typing import Any

from rest_framework import serializers

from notifications.models import InboxItem


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
