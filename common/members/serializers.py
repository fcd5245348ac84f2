"""API shapes of organisations and memberships."""

from __future__ import annotations

from typing import Any

from django.contrib.auth.models import User
from rest_framework import serializers

from common.members.selectors import organizations_visible
from common.models import MemberRole, Organization, OrganizationMember
from common.serializers import (
    FixedFieldsMixin,
    StrictCharField,
    StrictModelSerializer,
    StrictPrimaryKeyRelatedField,
)


class OrganizationSerializer(StrictModelSerializer[Organization]):
    class Meta:
        model = Organization
        fields = ("id", "name", "created_at")
        read_only_fields = ("id", "created_at")


class MemberSerializer(serializers.ModelSerializer[OrganizationMember]):
    username = serializers.CharField(source="user.username", read_only=True)

    class Meta:
        model = OrganizationMember
        fields = ("id", "organization", "user", "username", "role", "created_at")
        read_only_fields = fields


class MemberCreateSerializer(serializers.Serializer[Any]):
    """The user by id or by user name (exactly one of the two)."""

    organization = StrictPrimaryKeyRelatedField(queryset=Organization.objects.none())
    user = StrictPrimaryKeyRelatedField(queryset=User.objects.all(), required=False)
    username = StrictCharField(max_length=150, required=False)
    role = serializers.ChoiceField(choices=MemberRole.choices, default=MemberRole.VIEWER)

    def get_fields(self) -> dict[str, Any]:
        fields: dict[str, Any] = super().get_fields()
        fields["organization"].queryset = organizations_visible(
            scope=self.context.get("scope", frozenset())
        )
        return fields

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        if ("user" in attrs) == ("username" in attrs):
            raise serializers.ValidationError(
                {"user": ["give either user (an id) or username, not both or neither"]}
            )
        if "username" in attrs:
            user = User.objects.filter(username=attrs.pop("username")).first()
            if user is None:
                raise serializers.ValidationError({"username": ["no user of this name"]})
            attrs["user"] = user
        return attrs


class MemberUpdateSerializer(FixedFieldsMixin, StrictModelSerializer[OrganizationMember]):
    fixed_fields = {
        name: "a membership is of one user in one organisation; add a new one"
        for name in ("organization", "user", "username")
    }

    class Meta:
        model = OrganizationMember
        fields = ("role",)
