"""Alarms over the API (``/api/v1/alarms/``): any member reads the alarms of their
organisations, paged by cursor and filtered by farm, status and severity; an operator
acknowledges or clears one with a comment. Another organisation's alarm is a 404; a move the
alarm's status refuses is a 409; an empty or oversized comment a 400 naming ``comment``."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

import django_filters
from django.db.models import QuerySet
from django.utils import timezone
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework.decorators import action
from rest_framework.pagination import CursorPagination
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.routers import SimpleRouter

from alarms import schema_docs
from alarms.models import Alarm
from alarms.selectors import alarm_transitions
from alarms.serializers import (
    AlarmActRequestSerializer,
    AlarmSerializer,
    AlarmTransitionSerializer,
)
from alarms.services import alarm_acknowledge, alarm_clear
from alarms.states import AlarmSeverity, AlarmStatus
from common.api import ScopedViewSet, idempotent, valid_data
from common.errors import Conflict
from common.pagination import NewestFirstCursor
from common.roles import action_roles
from common.tenancy import OrgScope, scope_filter

_REFUSED = OpenApiResponse(description="conflict: the alarm's status does not allow this move")
Move = Callable[..., bool]


class OldestFirstCursor(CursorPagination):
    ordering = "pk"
    page_size_query_param = "page_size"
    max_page_size = 200


class AlarmFilter(django_filters.FilterSet):
    farm = django_filters.NumberFilter(field_name="farm_id")
    status = django_filters.ChoiceFilter(choices=AlarmStatus.choices)
    severity = django_filters.ChoiceFilter(choices=AlarmSeverity.choices)

    class Meta:
        model = Alarm
        fields = ("farm", "status", "severity")


@schema_docs.ALARMS
class AlarmViewSet(ScopedViewSet):
    """Conditions a person must see; acknowledging stops the repeats, clearing closes."""

    serializer_class = AlarmSerializer
    queryset = Alarm.objects.none()
    filterset_class = AlarmFilter
    pagination_class = NewestFirstCursor
    required_roles = action_roles(
        read=("list", "retrieve", "timeline"), operate=("acknowledge", "clear")
    )
    organization_path = "organization_id"

    def scoped(self, scope: OrgScope) -> QuerySet[Alarm]:
        return scope_filter(Alarm.objects.all(), scope, "organization_id").order_by("-pk")

    def _act(self, request: Request, move: Move) -> Response:
        alarm: Alarm = self.get_object()
        body = valid_data(AlarmActRequestSerializer(data=request.data))
        now: datetime = timezone.now()
        actor = request.user.get_username()
        if not move(alarm_id=alarm.pk, actor=actor, comment=body["comment"], now=now):
            alarm.refresh_from_db()
            raise Conflict(f"the alarm is {alarm.status}")
        alarm.refresh_from_db()
        return Response(AlarmSerializer(alarm).data)

    @idempotent(request=AlarmActRequestSerializer, responses={200: AlarmSerializer, 409: _REFUSED})
    @action(detail=True, methods=["post"])
    def acknowledge(self, request: Request, pk: str | None = None) -> Response:
        """Only an active alarm is acknowledged; its repeats stop in the same move."""
        return self._act(request, alarm_acknowledge)

    @idempotent(request=AlarmActRequestSerializer, responses={200: AlarmSerializer, 409: _REFUSED})
    @action(detail=True, methods=["post"])
    def clear(self, request: Request, pk: str | None = None) -> Response:
        """An active or acknowledged alarm is cleared by hand."""
        return self._act(request, alarm_clear)

    @extend_schema(responses=AlarmTransitionSerializer(many=True))
    @action(detail=True, methods=["get"], pagination_class=OldestFirstCursor, filterset_class=None)
    def timeline(self, request: Request, pk: str | None = None) -> Response:
        """The alarm's audit trail, oldest first."""
        alarm: Alarm = self.get_object()
        page = self.paginate_queryset(alarm_transitions(alarm.pk)) or []
        return self.get_paginated_response(AlarmTransitionSerializer(page, many=True).data)


router = SimpleRouter()
router.register("alarms", AlarmViewSet, basename="alarm")
urlpatterns = router.urls
