"""``/api/v1/user-messages/``: a user schedules a message to a farm's people (list, detail,
create, patch, ``POST …/cancel/``). Rows are scoped to the caller's organisations (another
organisation's message is a 404); writes need the ``operator`` role in the farm's
organisation (``required_roles``); every POST
honours ``Idempotency-Key``. Writes go through the user-message services, whose refusals are
400s on the field they name."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from typing import Any

import django_filters
from django.db.models import QuerySet
from django.urls import include, path
from django.utils import timezone
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiResponse, extend_schema, extend_schema_field
from rest_framework import serializers, status
from rest_framework.decorators import action
from rest_framework.exceptions import ValidationError
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.routers import SimpleRouter

from common.api import (
    ScopedViewSet,
    idempotent,
)
from common.errors import Conflict
from common.filters import IdFilter
from common.permissions import require_organization
from common.roles import action_roles
from common.serializers import FixedFieldsMixin, StrictIntegerField, StrictModelSerializer
from common.tenancy import OrgScope, scope_filter
from devices.selectors import farms_visible
from notifications.states import Channel
from reminders import schema_docs
from reminders.models import UserMessage, UserMessageRecurrence, UserMessageStatus
from reminders.models.user_messages import UserMessageRecipients
from reminders.selectors import (
    user_message_next_occurrence,
    user_messages_with_next_occurrence,
)
from reminders.serializers import farm_with_known_zone
from reminders.services.user_messages import (
    UserMessageCancelled,
    UserMessageInvalid,
    user_message_cancel,
    user_message_create,
    user_message_update,
)

RECIPIENTS_MAX = 200
API_NAMES = {"recurrence": "repeat", "recipients_policy": "recipients"}  # service → API


@extend_schema_field({"type": "array", "items": {"type": "integer"}})
class _IdListField(serializers.ListField):
    """Ids in, ids out (of a many-to-many on the way out)."""

    def to_representation(self, data: Any) -> list[int]:
        rows = data.all() if hasattr(data, "all") else data
        return sorted(getattr(row, "pk", row) for row in rows)


def _ids(help_text: str) -> _IdListField:
    return _IdListField(
        child=StrictIntegerField(min_value=1),
        required=False,
        max_length=RECIPIENTS_MAX,
        help_text=help_text,
    )


# What a message's author may set, at creation and in a PATCH alike.
EDITABLE_FIELDS = (
    "subject",
    "text",
    "recipients",
    "recipient_users",
    "recipient_contacts",
    "channels",
    "repeat",
    "starts_on",
    "send_time",
    "until",
    "count",
)


class UserMessageSerializer(StrictModelSerializer[UserMessage]):
    channels = serializers.ListField(
        child=serializers.ChoiceField(choices=Channel.choices), allow_empty=False, max_length=3
    )
    # API names of their own: the enums of reminders' ``recurrence`` and
    # ``recipients_policy`` hold other choices.
    repeat = serializers.ChoiceField(
        source="recurrence",
        choices=UserMessageRecurrence.choices,
        required=False,
        default=UserMessageRecurrence.ONCE,
        help_text="once, or daily / weekly (on the weekday of starts_on) up to until or count",
    )
    recipients = serializers.ChoiceField(
        source="recipients_policy",
        choices=UserMessageRecipients.choices,
        required=False,
        default=UserMessageRecipients.FARM_MEMBERS,
        help_text="a recipient policy of the farm, or 'chosen': recipient_users and contacts",
    )
    recipient_users = _ids("with recipients 'chosen': members of the farm, by user id")
    recipient_contacts = _ids("with recipients 'chosen': the farm's contacts, by id")
    next_occurrence_on = serializers.SerializerMethodField()

    class Meta:
        model = UserMessage
        fields: tuple[str, ...] = (
            "id",
            "guid",
            "farm",
            "author",
            *EDITABLE_FIELDS,
            "status",
            "version",
            "next_occurrence_on",
            "last_occurrence_on",
            "created_at",
            "updated_at",
            "cancelled_at",
        )
        read_only_fields = (
            "id",
            "guid",
            "author",
            "status",
            "version",
            "last_occurrence_on",
            "created_at",
            "updated_at",
            "cancelled_at",
        )
        extra_kwargs = {
            "starts_on": {"help_text": "local date (farm's zone) of the first or only send"},
            "send_time": {"help_text": "local time (farm's zone) of every send, e.g. 09:00"},
            "until": {"help_text": "recurring: the last local date that may have a send"},
            "count": {"help_text": "recurring: how many sends at most"},
        }

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        fields: Any = self.fields
        if "scope" in self.context and "farm" in fields:
            fields["farm"].queryset = farms_visible(scope=self.context["scope"])

    def validate_farm(self, farm: Any) -> Any:
        return farm_with_known_zone(farm)

    @extend_schema_field(OpenApiTypes.DATETIME)
    def get_next_occurrence_on(self, message: UserMessage) -> str | None:
        found: datetime | None = getattr(message, "next_occurrence", None)
        if not hasattr(message, "next_occurrence"):  # just written, not read by the list
            found = user_message_next_occurrence(message_id=message.pk)
        return None if found is None else serializers.DateTimeField().to_representation(found)


class UserMessageUpdateSerializer(FixedFieldsMixin, UserMessageSerializer):
    """What a PATCH may name (the read-only fields are the answer's, not the request's)."""

    fixed_fields = {"farm": "cannot be changed; cancel and create a new message instead"}

    class Meta(UserMessageSerializer.Meta):
        fields = EDITABLE_FIELDS


class UserMessageFilter(django_filters.FilterSet):
    farm = IdFilter(field_name="farm_id", help_text="only this farm's messages")
    status = django_filters.ChoiceFilter(choices=UserMessageStatus.choices)

    class Meta:
        model = UserMessage
        fields = ("farm", "status")


@contextmanager
def _refusals() -> Iterator[None]:
    try:
        yield
    except UserMessageCancelled as exc:
        raise Conflict(str(exc)) from None
    except UserMessageInvalid as exc:
        raise ValidationError({API_NAMES.get(exc.field, exc.field): [str(exc)]}) from None


@schema_docs.USER_MESSAGES
class UserMessageViewSet(ScopedViewSet):
    """Messages a user schedules to a farm's people, once or recurring."""

    serializer_class = UserMessageSerializer
    queryset = UserMessage.objects.none()
    filterset_class = UserMessageFilter
    required_roles = action_roles(operate=("create", "partial_update", "cancel"))
    organization_path = "farm.organization_id"

    def scoped(self, scope: OrgScope) -> QuerySet[UserMessage]:
        rows = UserMessage.objects.select_related("farm").prefetch_related(
            "recipient_users", "recipient_contacts"
        )
        rows = user_messages_with_next_occurrence(rows)
        return scope_filter(rows, scope, "farm__organization_id").order_by("pk")

    @idempotent(responses={201: UserMessageSerializer})
    def create(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        """Schedule a message: its first occurrences get their scheduler rows at once."""
        body = UserMessageSerializer(data=request.data, context=self.write_context())
        body.is_valid(raise_exception=True)
        data = dict(body.validated_data)
        farm = data.pop("farm")
        require_organization(request, self, farm.organization_id)
        with _refusals():
            message = user_message_create(
                farm_id=farm.pk, author_id=request.user.pk, now=timezone.now(), **data
            )
        message = self.get_queryset().get(pk=message.pk)
        return Response(self.get_serializer(message).data, status=status.HTTP_201_CREATED)

    @extend_schema(
        request=UserMessageUpdateSerializer,
        responses={200: UserMessageSerializer, 409: OpenApiResponse(description="cancelled")},
    )
    def partial_update(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        """Subject, text, recipients, channels: pending sends keep their rows and send what
        the message says then. The schedule: pending sends move to their new instants."""
        message = self.get_object()
        body = UserMessageUpdateSerializer(
            message, data=request.data, partial=True, context=self.write_context()
        )
        body.is_valid(raise_exception=True)
        with _refusals():
            user_message_update(message_id=message.pk, now=timezone.now(), **body.validated_data)
        return Response(self.get_serializer(self.get_queryset().get(pk=message.pk)).data)

    @idempotent(request=None, responses=UserMessageSerializer)
    @action(detail=True, methods=["post"])
    def cancel(self, request: Request, pk: str | None = None) -> Response:
        """Pending sends are deactivated; sent ones stay as history. Twice is a no-op."""
        message = self.get_object()
        user_message_cancel(message_id=message.pk, now=timezone.now())
        return Response(self.get_serializer(self.get_queryset().get(pk=message.pk)).data)


router = SimpleRouter()
router.register("user-messages", UserMessageViewSet, basename="user-message")

urlpatterns = [path("", include(router.urls))]
