"""Fleet rollouts over the API (``/api/v1/rollouts/``): an operator creates one (one value on
many endpoints, in waves) and pauses, resumes or cancels it with a reason; any member reads
rollouts with their counters, their targets and their timeline. Rows are scoped to the
caller's organisations (another organisation's rollout is a 404); a rollout's organisation
is its farms'. Every check of a new rollout is ``rollout_create``'s, answered as a 400 naming
the fields; a move the rollout's state refuses is a 409. Rollouts, their targets and their
timelines page by cursor: a rollout adds a timeline row per status move."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import django_filters
from django.db.models import F, Prefetch, QuerySet
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import status
from rest_framework.decorators import action
from rest_framework.exceptions import NotFound, ValidationError
from rest_framework.pagination import CursorPagination
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.routers import SimpleRouter

from common.api import ScopedViewSet, idempotent, request_scope, valid_data
from common.errors import Conflict
from common.models import Organization
from common.pagination import NewestFirstCursor
from common.permissions import require_organization
from common.roles import action_roles
from common.tenancy import OrgScope, scope_filter
from devices.models import Device
from devices.selectors import farms_visible
from rollouts import schema_docs
from rollouts.models import Rollout, RolloutTarget, RolloutTransition
from rollouts.serializers import (
    RolloutActRequestSerializer,
    RolloutCreateRequestSerializer,
    RolloutSerializer,
    RolloutTargetSerializer,
    RolloutTransitionSerializer,
)
from rollouts.services.counts import rollouts_count
from rollouts.services.lifecycle import RolloutMoveRefused, rollout_act
from rollouts.services.plan import RolloutInvalid, RolloutSpec, rollout_create
from rollouts.states import RolloutStatus
from scheduler.services.support import SupportReasonMissing

_REFUSED = OpenApiResponse(description="conflict: the rollout's state does not allow this move")


class OldestFirstCursor(CursorPagination):
    """A rollout's targets in selection order and its timeline in time order, by id."""

    ordering = "pk"
    page_size_query_param = "page_size"
    max_page_size = 200


class RolloutFilter(django_filters.FilterSet):
    # ``?state=``: the parameter keeps its name (an external contract).
    state = django_filters.ChoiceFilter(field_name="status", choices=RolloutStatus.choices)

    class Meta:
        model = Rollout
        fields = ("state",)


@schema_docs.ROLLOUTS
class RolloutViewSet(ScopedViewSet):
    """One value on many endpoints, sent in waves that a canary and abort criteria guard."""

    serializer_class = RolloutSerializer
    queryset = Rollout.objects.none()
    filterset_class = RolloutFilter
    pagination_class = NewestFirstCursor
    required_roles = action_roles(
        read=("list", "retrieve", "targets", "timeline"),
        operate=("create", "pause", "resume", "cancel"),
    )
    organization_path = "organization_id"

    def scoped(self, scope: OrgScope) -> QuerySet[Rollout]:
        return scope_filter(Rollout.objects.all(), scope, "organization_id").order_by("-pk")

    @staticmethod
    def _for_page(rows: QuerySet[Rollout]) -> QuerySet[Rollout]:
        """What a row shows, fetched for the whole page: a page costs the same few queries
        whatever its size (the counters are one grouped query more, ``_shown``)."""
        devices = Prefetch("devices", Device.objects.only("pk"))
        return rows.select_related("requested_by").prefetch_related("farms", devices)

    def _shown(self, rollouts: Sequence[Rollout]) -> list[dict[str, Any]]:
        """The rollouts as answered, their counters from one grouped query."""
        context = {
            **self.get_serializer_context(),
            "counts": rollouts_count(r.pk for r in rollouts),
        }
        return list(RolloutSerializer(rollouts, many=True, context=context).data)

    def _answer(self, rollout_id: int, code: int = status.HTTP_200_OK) -> Response:
        rollout = self._for_page(self.get_queryset()).filter(pk=rollout_id).first()
        if rollout is None:
            raise NotFound()
        return Response(self._shown([rollout])[0], status=code)

    def list(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        page = self.paginate_queryset(self._for_page(self.filter_queryset(self.get_queryset())))
        return self.get_paginated_response(self._shown(page or []))

    def retrieve(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        return Response(self._shown([self.get_object()])[0])

    def _organization(self, farm_ids: Sequence[int]) -> Organization:
        """The organisation of the farms named (all one's, and readable by the caller), if
        the caller may operate there (else 403)."""
        farms = farms_visible(scope=request_scope(self.request)).filter(pk__in=list(farm_ids))
        organizations = {f.organization for f in farms.select_related("organization")}
        if not organizations:
            raise ValidationError({"farm_ids": ["names no farm of yours"]})
        if len(organizations) > 1:
            raise ValidationError({"farm_ids": ["names farms of more than one organisation"]})
        (organization,) = organizations
        require_organization(self.request, self, organization.pk)
        return organization

    @idempotent(request=RolloutCreateRequestSerializer, responses={201: RolloutSerializer})
    def create(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        """Check the plan against its bounds and the fleet, then create the rollout with its
        targets; nothing is created when a field is refused (400 naming each)."""
        data = valid_data(RolloutCreateRequestSerializer(data=request.data))
        organization = self._organization(data["farm_ids"])
        try:
            rollout = rollout_create(
                organization=organization, actor=request.user, spec=RolloutSpec(**data)
            )
        except RolloutInvalid as exc:
            raise ValidationError(exc.errors) from None
        return self._answer(rollout.pk, status.HTTP_201_CREATED)

    def _act(self, request: Request, move: str) -> Response:
        rollout: Rollout = self.get_object()
        body = valid_data(RolloutActRequestSerializer(data=request.data))
        try:
            rollout_act(
                rollout_id=rollout.pk, action=move, actor=request.user, reason=body["reason"]
            )
        except SupportReasonMissing as exc:
            raise ValidationError({"reason": [str(exc)]}) from None
        except RolloutMoveRefused as exc:
            raise Conflict(str(exc)) from None
        except Rollout.DoesNotExist:
            raise NotFound() from None
        return self._answer(rollout.pk)

    @idempotent(
        request=RolloutActRequestSerializer, responses={200: RolloutSerializer, 409: _REFUSED}
    )
    @action(detail=True, methods=["post"])
    def pause(self, request: Request, pk: str | None = None) -> Response:
        """Start no more targets; the commands already sent run to their end. A scheduled or
        running rollout may be paused."""
        return self._act(request, "pause")

    @idempotent(
        request=RolloutActRequestSerializer, responses={200: RolloutSerializer, 409: _REFUSED}
    )
    @action(detail=True, methods=["post"])
    def resume(self, request: Request, pk: str | None = None) -> Response:
        """Go on from where the pause left the driver (its rate, ramp and canary)."""
        return self._act(request, "resume")

    @idempotent(
        request=RolloutActRequestSerializer, responses={200: RolloutSerializer, 409: _REFUSED}
    )
    @action(detail=True, methods=["post"])
    def cancel(self, request: Request, pk: str | None = None) -> Response:
        """End the rollout: its targets not yet sent are skipped (``cancelled``); the commands
        already sent run to their end."""
        return self._act(request, "cancel")

    @extend_schema(responses=RolloutTargetSerializer(many=True))
    @action(detail=True, methods=["get"], pagination_class=OldestFirstCursor, filterset_class=None)
    def targets(self, request: Request, pk: str | None = None) -> Response:
        """The rollout's targets in selection order, each with its device, farm, state and
        the wave that sent or skipped it (one query per page)."""
        rollout: Rollout = self.get_object()
        rows = (
            RolloutTarget.objects.filter(rollout_id=rollout.pk)
            .annotate(
                device_serial=F("endpoint__device__serial_number"),
                farm_id=F("endpoint__device__farm_id"),
                command_status=F("command__status"),
            )
            .order_by("pk")
        )
        page = self.paginate_queryset(rows) or []
        return self.get_paginated_response(RolloutTargetSerializer(page, many=True).data)

    @extend_schema(responses=RolloutTransitionSerializer(many=True))
    @action(detail=True, methods=["get"], pagination_class=OldestFirstCursor, filterset_class=None)
    def timeline(self, request: Request, pk: str | None = None) -> Response:
        """Every status move with who made it and why, oldest first."""
        rollout: Rollout = self.get_object()
        rows = RolloutTransition.objects.filter(rollout_id=rollout.pk).select_related("actor")
        page = self.paginate_queryset(rows.order_by("pk")) or []
        return self.get_paginated_response(RolloutTransitionSerializer(page, many=True).data)


router = SimpleRouter()
router.register("rollouts", RolloutViewSet, basename="rollout")
urlpatterns = router.urls
