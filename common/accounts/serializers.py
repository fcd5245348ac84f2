"""What the API shows of a token: its metadata, and the key only in the answer that issued it."""

from __future__ import annotations

from typing import Any

from rest_framework import serializers

from common.accounts.models import ApiToken

TOKEN_FIELDS: tuple[str, ...] = ("prefix", "created_at", "last_used_at", "expires_at")


class ApiTokenSerializer(serializers.ModelSerializer[ApiToken]):
    class Meta:
        model = ApiToken
        fields = TOKEN_FIELDS
        read_only_fields = TOKEN_FIELDS


class IssuedTokenSerializer(ApiTokenSerializer):
    key = serializers.SerializerMethodField(help_text="Shown once: only its digest is stored.")

    class Meta(ApiTokenSerializer.Meta):
        fields = ("key", *TOKEN_FIELDS)
        read_only_fields = fields

    def get_key(self, obj: ApiToken) -> str:
        key: Any = self.context["key"]
        return str(key)
