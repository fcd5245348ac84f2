"""External contacts and their channel preferences over the API (``/api/v1/contacts/``,
``/api/v1/channel-preferences/``), scoped to the caller's organisations through the
contact's farm: viewers read, admins write.

A webhook contact's signing secret is shown once: in the answer of the create and of
``POST /contacts/<id>/rotate-secret/`` (``Cache-Control: no-store``), never on a read, a list
or a replay by Idempotency-Key (the stored answer leaves it out). ``DELETE /contacts/<id>/``
deactivates: the contact is told nothing more, its notifications keep pointing at it, and
``PATCH {"is_active": true}`` brings it back. A webhook URL no webhook may go to (a private or
loopback address not listed in WEBHOOK_ALLOWED_NETWORKS) is a 400 on ``webhook_url``."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import django_filters
from django.db.models import QuerySet
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import status
from rest_framework.decorators import action
from rest_framework.exceptions import APIException, NotFound, ValidationError
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.routers import SimpleRouter

from common.api import (
    NO_STORE,
    ScopedViewSet,
    idempotent,
    secret_blanked,
    valid_data,
)
from common.errors import Conflict
from common.filters import IdFilter, StrictBooleanFilter
from common.permissions import require_organization
from common.roles import action_roles
from common.tenancy import OrgScope
from notifications import schema_docs
from notifications.destinations import WebhookDestinationForbidden
from notifications.models import ChannelPreference, ExternalContact
from notifications.selectors import contact_channel_preferences_visible, external_contacts_visible
from notifications.serializers import (
    ChannelPreferenceSerializer,
    ChannelPreferenceSetSerializer,
    ChannelPreferenceUpdateSerializer,
    ContactCreateSerializer,
    ContactSerializer,
    ContactUpdateSerializer,
    ContactWithSecretSerializer,
)
from notifications.services.contacts import (
    ExternalContactNotFound,
    external_contact_create,
    external_contact_deactivate,
    external_contact_update,
    external_contact_webhook_secret_issue,
)
from notifications.services.preferences import (
    PreferenceRefused,
    channel_preference_delete,
    channel_preference_enable,
    contact_channel_preference_set,
)
from notifications.states import Channel
from notifications.webhook_secrets import WebhookSecretUnusable

_CONFLICT = OpenApiResponse(description="the row is in no state for this request")
_NO_SECRETS = OpenApiResponse(description="webhook_secrets_unavailable: no WEBHOOK_SECRET_KEY")


class WebhookSecretsUnavailable(APIException):
    """This deployment cannot issue webhook secrets (no WEBHOOK_SECRET_KEY): nothing was
    changed."""

    status_code = status.HTTP_503_SERVICE_UNAVAILABLE
    default_code = "webhook_secrets_unavailable"
    default_detail = "Webhook secrets cannot be issued here (WEBHOOK_SECRET_KEY is not set)."


@contextmanager
def _refusals() -> Iterator[None]:
    """The services' refusals as the API's answers: a field error, a 409, a 404 for a row
    gone meanwhile, a 503 when no secret can be issued."""
    try:
        yield
    except WebhookDestinationForbidden as exc:
        raise ValidationError({"webhook_url": [str(exc)]}) from None
    except PreferenceRefused as exc:
        if exc.field == "opted_out_at":
            raise Conflict(exc.message, code="opted_out") from None
        raise ValidationError({exc.field: [exc.message]}) from None
    except ExternalContactNotFound:
        raise NotFound() from None
    except WebhookSecretUnusable:
        raise WebhookSecretsUnavailable() from None


class ContactFilter(django_filters.FilterSet):
    farm = IdFilter(field_name="farm_id", help_text="only this farm's contacts")
    is_active = StrictBooleanFilter(field_name="is_active", help_text="only (in)active ones")

    class Meta:
        model = ExternalContact
        fields = ("farm", "is_active")


@schema_docs.CONTACTS
class ExternalContactViewSet(ScopedViewSet):
    """People outside the product told by email or webhook about a farm."""

    serializer_class = ContactSerializer
    queryset = ExternalContact.objects.none()
    filterset_class = ContactFilter
    required_roles = action_roles(
        configure=("create", "partial_update", "destroy", "rotate_secret")
    )
    organization_path = "farm.organization_id"

    def scoped(self, scope: OrgScope) -> QuerySet[ExternalContact]:
        return external_contacts_visible(scope=scope)

    @idempotent(
        request=ContactCreateSerializer,
        responses={201: ContactWithSecretSerializer, 503: _NO_SECRETS},
        stored=secret_blanked("webhook_secret"),
    )
    def create(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        """A contact on one of the caller's farms; with a webhook URL, its signing secret,
        in this answer only."""
        data = valid_data(ContactCreateSerializer(data=request.data, context=self.write_context()))
        require_organization(request, self, data["farm"].organization_id)
        url = data.get("webhook_url", "")
        with _refusals():
            contact, secret = external_contact_create(
                farm_id=data["farm"].pk,
                name=data["name"],
                email=data.get("email", ""),
                webhook_url=url,
                with_webhook_secret=bool(url),
            )
        body = {**ContactSerializer(contact).data, "webhook_secret": secret}
        return Response(body, status=status.HTTP_201_CREATED, headers=NO_STORE)

    @extend_schema(request=ContactUpdateSerializer, responses=ContactSerializer)
    def partial_update(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        contact: ExternalContact = self.get_object()
        data = valid_data(ContactUpdateSerializer(contact, data=request.data, partial=True))
        with _refusals():
            contact = external_contact_update(contact_id=contact.pk, changes=data)
        return Response(ContactSerializer(contact).data)

    @extend_schema(responses={204: None})
    def destroy(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        """Deactivate the contact (again: a no-op); its row and history stay."""
        contact: ExternalContact = self.get_object()
        external_contact_deactivate(contact_id=contact.pk)
        return Response(status=status.HTTP_204_NO_CONTENT)

    @idempotent(
        request=None,
        responses={200: ContactWithSecretSerializer, 409: _CONFLICT, 503: _NO_SECRETS},
        stored=secret_blanked("webhook_secret"),
    )
    @action(detail=True, methods=["post"], url_path="rotate-secret", url_name="rotate_secret")
    def rotate_secret(self, request: Request, pk: str | None = None) -> Response:
        """A new webhook signing secret, in this answer only: deliveries sign with it from
        now on and the previous one stops at once."""
        contact: ExternalContact = self.get_object()
        if not contact.webhook_url:
            detail = "The contact has no webhook URL: set one, then rotate its secret."
            raise Conflict(detail, code="no_webhook_url")
        with _refusals():
            secret = external_contact_webhook_secret_issue(contact_id=contact.pk)
        body = {**ContactSerializer(self.get_object()).data, "webhook_secret": secret}
        return Response(body, headers=NO_STORE)


class ChannelPreferenceFilter(django_filters.FilterSet):
    contact = IdFilter(field_name="contact_id", help_text="only this contact's preferences")
    channel = django_filters.ChoiceFilter(choices=Channel.choices)

    class Meta:
        model = ChannelPreference
        fields = ("contact", "channel")


@schema_docs.CHANNEL_PREFERENCES
class ChannelPreferenceViewSet(ScopedViewSet):
    """External contacts' channel preferences: ``POST`` sets the one row of (contact,
    channel), made (201) or changed (200); ``DELETE`` returns the channel to its default
    (on), refused (409) for a row that holds the recipient's own opt-out."""

    serializer_class = ChannelPreferenceSerializer
    queryset = ChannelPreference.objects.none()
    filterset_class = ChannelPreferenceFilter
    required_roles = action_roles(configure=("create", "partial_update", "destroy"))
    organization_path = "contact.farm.organization_id"

    def scoped(self, scope: OrgScope) -> QuerySet[ChannelPreference]:
        return contact_channel_preferences_visible(scope=scope)

    @idempotent(
        request=ChannelPreferenceSetSerializer,
        responses={200: ChannelPreferenceSerializer, 201: ChannelPreferenceSerializer},
    )
    def create(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        context = self.write_context()
        data = valid_data(ChannelPreferenceSetSerializer(data=request.data, context=context))
        contact: ExternalContact = data["contact"]
        require_organization(request, self, contact.farm.organization_id)
        with _refusals():
            preference, created = contact_channel_preference_set(
                contact_id=contact.pk, channel=data["channel"], enabled=data["enabled"]
            )
        code = status.HTTP_201_CREATED if created else status.HTTP_200_OK
        return Response(ChannelPreferenceSerializer(preference).data, status=code)

    @extend_schema(request=ChannelPreferenceUpdateSerializer, responses=ChannelPreferenceSerializer)
    def partial_update(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        preference: ChannelPreference = self.get_object()
        data = valid_data(ChannelPreferenceUpdateSerializer(data=request.data, partial=True))
        if "enabled" in data:
            preference = channel_preference_enable(
                preference_id=preference.pk, enabled=data["enabled"]
            )
        return Response(ChannelPreferenceSerializer(preference).data)

    @extend_schema(responses={204: None, 409: _CONFLICT})
    def destroy(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        preference: ChannelPreference = self.get_object()
        with _refusals():
            channel_preference_delete(preference_id=preference.pk)
        return Response(status=status.HTTP_204_NO_CONTENT)


router = SimpleRouter()
router.register("contacts", ExternalContactViewSet, basename="contact")
router.register("channel-preferences", ChannelPreferenceViewSet, basename="channel-preference")
urlpatterns = router.urls
