"""The in-app inbox over DRF: ``GET /api/v1/inbox/`` (newest first, ``?unread=1``) and
``POST /api/v1/inbox/<id>/read/``. A user only ever sees their own items."""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet
from django.urls import path
from drf_spectacular.utils import extend_schema
from rest_framework import generics, status
from rest_framework.authentication import BasicAuthentication, SessionAuthentication
from rest_framework.pagination import PageNumberPagination
from rest_framework.permissions import IsAuthenticated
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from notifications.models import InboxItem
from notifications.selectors import inbox_items_for
from notifications.serializers import InboxItemSerializer
from notifications.services.inbox import InboxItemNotFound, inbox_item_mark_read

AUTHENTICATION = [SessionAuthentication, BasicAuthentication]


class InboxPagination(PageNumberPagination):
    page_size = 50
    page_size_query_param = "page_size"
    max_page_size = 200


class InboxListApi(generics.ListAPIView[InboxItem]):
    authentication_classes = AUTHENTICATION
    permission_classes = [IsAuthenticated]
    serializer_class = InboxItemSerializer
    pagination_class = InboxPagination

    def get_queryset(self) -> QuerySet[InboxItem]:
        unread = self.request.query_params.get("unread", "").lower() in {"1", "true", "yes"}
        return inbox_items_for(user_id=self.request.user.pk, unread_only=unread)


class InboxMarkReadApi(APIView):
    authentication_classes = AUTHENTICATION
    permission_classes = [IsAuthenticated]

    @extend_schema(request=None, responses={200: InboxItemSerializer})
    def post(self, request: Request, item_id: int, *args: Any, **kwargs: Any) -> Response:
        try:
            item = inbox_item_mark_read(user_id=request.user.pk, item_id=item_id)
        except InboxItemNotFound:
            return Response({"detail": "Not found."}, status=status.HTTP_404_NOT_FOUND)
        return Response(InboxItemSerializer(item).data)


urlpatterns = [
    path("inbox/", InboxListApi.as_view(), name="inbox-list"),
    path("inbox/<int:item_id>/read/", InboxMarkReadApi.as_view(), name="inbox-read"),
]
