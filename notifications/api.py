"""Notifications over DRF.

The in-app inbox: ``GET /api/v1/inbox/`` (newest first, ``?unread=1``) and
``POST /api/v1/inbox/<id>/read/``; a user only ever sees their own items.

Support's view: ``/api/v1/notifications/`` (filters ``status``, ``channel``, ``farm``; newest
first, paged by an opaque cursor: ``next``/``previous`` links, no count), the detail with
attempts and transitions, and ``retry/`` / ``cancel/`` with a required reason
(the support services record the user and the reason in the transition row). Rows are scoped
to the caller's organisations through their farm; farm-less rows (operator alerts) are for
superusers only.

External contacts and their channel preferences: ``notifications.contacts_api``."""

from __future__ import annotations

from typing import Any, cast

import django_filters
from django.db.models import Prefetch, QuerySet
from django.urls import include, path
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import generics, status, viewsets
from rest_framework.decorators import action
from rest_framework.pagination import PageNumberPagination
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.routers import SimpleRouter
from rest_framework.serializers import BaseSerializer
from rest_framework.views import APIView

from common.api import idempotent, request_scope
from common.errors import error_body
from common.filters import IdFilter, StrictBooleanFilter
from common.pagination import NewestFirstCursor
from common.roles import Need, action_roles
from common.tenancy import scope_filter
from notifications import schema_docs
from notifications.models import (
    InboxItem,
    Notification,
    NotificationAttempt,
    NotificationTransition,
)
from notifications.selectors import inbox_items_for
from notifications.serializers import (
    InboxItemSerializer,
    NotificationActionSerializer,
    NotificationDetailSerializer,
    NotificationSerializer,
)
from notifications.services.inbox import InboxItemNotFound, inbox_item_mark_read
from notifications.services.support import notification_cancel, notification_retry
from notifications.states import Channel, NotificationStatus


class InboxPagination(PageNumberPagination):
    """Page numbers with a count: one user's items, read on their (user, created_at) index
    and bounded by the notifications' retention."""

    page_size = 50
    page_size_query_param = "page_size"
    max_page_size = 200


class InboxFilter(django_filters.FilterSet):
    unread = StrictBooleanFilter(method="filter_unread", help_text="only unread items")

    class Meta:
        model = InboxItem
        fields = ("unread",)

    def filter_unread(
        self, rows: QuerySet[InboxItem], name: str, value: bool
    ) -> QuerySet[InboxItem]:
        """``unread=0`` lists every item, as before (not only the read ones)."""
        return rows.filter(read_at__isnull=True) if value else rows


@schema_docs.INBOX_LIST
class InboxListApi(generics.ListAPIView[InboxItem]):
    """The caller's own in-app notifications, newest first."""

    required_roles = {"get": Need.SIGNED_IN}  # the caller's own items
    serializer_class = InboxItemSerializer
    pagination_class = InboxPagination
    filterset_class = InboxFilter

    def get_queryset(self) -> QuerySet[InboxItem]:
        return inbox_items_for(user_id=cast(int, self.request.user.pk), unread_only=False)


@schema_docs.INBOX_READ
class InboxMarkReadApi(APIView):
    """Mark one of the caller's inbox items read."""

    required_roles = {"post": Need.SIGNED_IN}

    @extend_schema(request=None, responses={200: InboxItemSerializer})
    def post(self, request: Request, item_id: int, *args: Any, **kwargs: Any) -> Response:
        try:
            item = inbox_item_mark_read(user_id=cast(int, request.user.pk), item_id=item_id)
        except InboxItemNotFound:
            return Response(error_body("not_found", "Not found."), status=status.HTTP_404_NOT_FOUND)
        return Response(InboxItemSerializer(item).data)


_REFUSED = OpenApiResponse(description="the notification is in no state for this move")


class NotificationFilter(django_filters.FilterSet):
    status = django_filters.ChoiceFilter(choices=NotificationStatus.choices)
    channel = django_filters.ChoiceFilter(choices=Channel.choices)
    farm = IdFilter(field_name="farm_id", help_text="only this farm's notifications")

    class Meta:
        model = Notification
        fields = ("status", "channel", "farm")


@schema_docs.NOTIFICATIONS
class NotificationViewSet(viewsets.ReadOnlyModelViewSet):  # type: ignore[type-arg]
    """Support's view of what was told: notifications with their attempts and status moves;
    an operator retries or cancels one with a reason."""

    queryset = Notification.objects.none()
    pagination_class = NewestFirstCursor  # append-heavy: no COUNT(*), no OFFSET
    filterset_class = NotificationFilter
    required_roles = action_roles(operate=("retry", "cancel"))
    organization_path = "farm.organization_id"  # farm-less (operators' alerts): superusers

    def get_serializer_class(self) -> type[BaseSerializer[Any]]:
        return NotificationSerializer if self.action == "list" else NotificationDetailSerializer

    def get_queryset(self) -> QuerySet[Notification]:
        rows = scope_filter(
            Notification.objects.all(), request_scope(self.request), "farm__organization_id"
        )
        if self.action != "list":
            rows = rows.prefetch_related(
                Prefetch("attempts", NotificationAttempt.objects.order_by("attempt")),
                Prefetch("transitions", NotificationTransition.objects.order_by("at", "pk")),
            )
        return rows.order_by("-pk")

    @idempotent(
        request=NotificationActionSerializer,
        responses={200: NotificationDetailSerializer, 409: _REFUSED},
    )
    @action(detail=True, methods=["post"])
    def retry(self, request: Request, pk: str | None = None) -> Response:
        """Queue a failed or cancelled notification again with a fresh attempt budget; any
        other state is a 409 and nothing changes."""
        return self._move(request, notification_retry)

    @idempotent(
        request=NotificationActionSerializer,
        responses={200: NotificationDetailSerializer, 409: _REFUSED},
    )
    @action(detail=True, methods=["post"])
    def cancel(self, request: Request, pk: str | None = None) -> Response:
        """Stop a queued or failed notification for good; one being sent or already sent is a
        409."""
        return self._move(request, notification_cancel)

    def _move(self, request: Request, move: Any) -> Response:
        notification = self.get_object()
        body = NotificationActionSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        moved = move(
            notification_id=notification.pk,
            actor=request.user.get_username(),
            reason=body.validated_data["reason"],
        )
        if not moved:
            detail = f"notification is {notification.status}: {self.action} refused"
            return Response(error_body("conflict", detail), status=status.HTTP_409_CONFLICT)
        return Response(NotificationDetailSerializer(self.get_object()).data)


router = SimpleRouter()
router.register("notifications", NotificationViewSet, basename="notification")

urlpatterns = [
    path("inbox/", InboxListApi.as_view(), name="inbox-list"),
    path("inbox/<int:item_id>/read/", InboxMarkReadApi.as_view(), name="inbox-read"),
    path("", include(router.urls)),
    path("", include("notifications.contacts_api")),
]
