"""The reminders part of the REST API (``/api/v1/``): reminder settings and report
subscriptions (list, detail, create, update through the reminders services) and a manual
report run. Rows are scoped to the caller's organisations (another organisation's row is a
404); an admin configures them, an operator runs a report now (``required_roles``); every
POST honours ``Idempotency-Key`` like the rest of the API."""

from __future__ import annotations

from typing import Any

import django_filters
from django.db.models import Q, QuerySet
from django.urls import include, path
from django.utils import timezone
from drf_spectacular.utils import extend_schema
from rest_framework import mixins, status, viewsets
from rest_framework.decorators import action
from rest_framework.exceptions import ValidationError
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.routers import SimpleRouter

from common.api import idempotent, request_scope
from common.filters import IdFilter, StrictBooleanFilter
from common.permissions import RoleCheckedWrites
from common.roles import action_roles
from common.tenancy import OrgScope, scope_filter
from reminders import schema_docs
from reminders.models import ReminderSetting, ReportSubscription
from reminders.serializers import (
    ReminderSettingSerializer,
    ReportRunRequestSerializer,
    ReportRunResultSerializer,
    ReportSubscriptionSerializer,
    farm_with_known_zone,
)
from reminders.services.reports.subscriptions import (
    ReportSubscriptionInvalid,
    report_manual_run_request,
)
from reminders.services.settings import reminder_setting_deactivate
from scheduler.models import DueWork
from scheduler.services import EnsureOutcome


def reminder_settings_visible(*, scope: OrgScope) -> QuerySet[ReminderSetting]:
    """A setting belongs to a farm or to a whole organisation: either path may grant it."""
    rows = ReminderSetting.objects.all()
    if scope is not None:
        ids = list(scope)
        rows = rows.filter(Q(farm__organization_id__in=ids) | Q(organization_id__in=ids))
    return rows.order_by("pk")


class _FarmActiveFilter(django_filters.FilterSet):
    farm = IdFilter(field_name="farm_id", help_text="only this farm's rows")
    active = StrictBooleanFilter(field_name="active")


class ReminderSettingFilter(_FarmActiveFilter):
    class Meta:
        model = ReminderSetting
        fields = ("farm", "active")


class ReportSubscriptionFilter(_FarmActiveFilter):
    class Meta:
        model = ReportSubscription
        fields = ("farm", "active")


_CONFIGURED = ("create", "update", "partial_update")


class _WritableScopedViewSet(
    RoleCheckedWrites,
    mixins.CreateModelMixin,
    mixins.UpdateModelMixin,
    viewsets.ReadOnlyModelViewSet,  # type: ignore[type-arg]
):
    """List, detail, create and update; the caller's scope goes to the serializer so related
    rows of another organisation do not resolve."""

    def get_serializer_context(self) -> dict[str, Any]:
        return {**super().get_serializer_context(), "scope": request_scope(self.request)}

    @idempotent()
    def create(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        return super().create(request, *args, **kwargs)


@schema_docs.REMINDER_SETTINGS
class ReminderSettingViewSet(_WritableScopedViewSet):
    """How a farm, or every farm of an organisation, is reminded about one source type."""

    serializer_class = ReminderSettingSerializer
    queryset = ReminderSetting.objects.none()
    filterset_class = ReminderSettingFilter
    required_roles = action_roles(configure=(*_CONFIGURED, "deactivate"))

    def organization_of(self, row: Any) -> int | None:
        """A farm's setting belongs to the farm's organisation, else to its own."""
        get = row.get if isinstance(row, dict) else lambda name: getattr(row, name, None)
        farm, organization = get("farm"), get("organization")
        if farm is not None:
            return int(farm.organization_id)
        return None if organization is None else int(organization.pk)

    def get_queryset(self) -> QuerySet[ReminderSetting]:
        return reminder_settings_visible(scope=request_scope(self.request))

    @extend_schema(request=None, responses=ReminderSettingSerializer)
    @action(detail=True, methods=["post"])
    def deactivate(self, request: Request, pk: str | None = None) -> Response:
        """The setting stops reminding: its pending occurrences are deactivated, completed
        ones stay as history. Deactivating twice is a no-op."""
        setting = self.get_object()
        reminder_setting_deactivate(setting_id=setting.pk, now=timezone.now())
        setting.refresh_from_db()
        return Response(self.get_serializer(setting).data)


@schema_docs.REPORT_SUBSCRIPTIONS
class ReportSubscriptionViewSet(_WritableScopedViewSet):
    """A farm's automation summary, delivered every period of its recurrence."""

    serializer_class = ReportSubscriptionSerializer
    queryset = ReportSubscription.objects.none()
    filterset_class = ReportSubscriptionFilter
    required_roles = action_roles(configure=_CONFIGURED, operate=("run",))
    organization_path = "farm.organization_id"

    def get_queryset(self) -> QuerySet[ReportSubscription]:
        rows = scope_filter(
            ReportSubscription.objects.all(), request_scope(self.request), "farm__organization_id"
        )
        return rows.order_by("pk")

    @idempotent(
        request=ReportRunRequestSerializer,
        responses={201: ReportRunResultSerializer, 200: ReportRunResultSerializer},
    )
    @action(detail=True, methods=["post"])
    def run(self, request: Request, pk: str | None = None) -> Response:
        """Run the report now: 201 with a new scheduler row, 200 when ``run_id`` was asked for
        before (the same row, however often the client retries)."""
        sub = self.get_object()
        body = ReportRunRequestSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        farm_with_known_zone(sub.farm)
        run_id = body.validated_data["run_id"]
        try:
            result = report_manual_run_request(
                subscription_id=sub.pk,
                run_guid=run_id,
                now=timezone.now(),
                period_start=body.validated_data["period_start"],
            )
        except ReportSubscriptionInvalid as exc:
            raise ValidationError({"run_id": [str(exc)]}) from None
        data = {
            "run_id": run_id,
            "outcome": str(result.outcome),
            "scheduler": DueWork.objects.get(pk=result.scheduler_id),
        }
        code = (
            status.HTTP_201_CREATED
            if result.outcome == EnsureOutcome.INSERTED
            else status.HTTP_200_OK
        )
        return Response(ReportRunResultSerializer(data).data, status=code)


router = SimpleRouter()
router.register("reminder-settings", ReminderSettingViewSet, basename="reminder-setting")
router.register("report-subscriptions", ReportSubscriptionViewSet, basename="report-subscription")

urlpatterns = [path("", include(router.urls))]
