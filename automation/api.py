"""The execution-core part of the REST API (``/api/v1/``): telemetry ingest over HTTP (the
same ``telemetry_ingest`` service as the MQTT bridge), rules (validated like the safety
gates; a deleted rule is not found), commands (read-only, plus support's manual retry
of an ended command), an operator's manual command on an endpoint and the cancel of its hold
(``automation.services.manual``), rule executions with their timelines, diagnostics, and the
scheduler table (read-only). Every row is scoped to the caller's organisations (else 404);
what each role may do is each view's ``required_roles`` (``common.permissions``); manual
control lives in ``automation.manual_api``. Commands, executions and the scheduler table
grow without bound: they page newest first by cursor (``common.pagination``), never counted."""

from __future__ import annotations

import json
from dataclasses import asdict
from datetime import timedelta
from typing import Any

import django_filters
from django.db.models import Prefetch, QuerySet
from django.urls import include, path
from django.utils import timezone
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import mixins, status, viewsets
from rest_framework.decorators import action
from rest_framework.exceptions import NotFound, ValidationError
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.routers import SimpleRouter
from rest_framework.serializers import BaseSerializer
from rest_framework.views import APIView

from automation import schema_docs
from automation.diagnostics import (
    command_timeline,
    commands_retrying,
    commands_uncertain,
    commands_visible,
    devices_top_timeouts,
    execution_timeline,
    executions_visible,
)
from automation.manual_api import EndpointCommandApi, EndpointHoldCancelApi
from automation.models import (
    AutomationRule,
    AutomationRuleAction,
    AutomationRuleCondition,
    AutomationRuleExecution,
    AutomationRuleSchedule,
    DeviceCommand,
)
from automation.serializers import (
    CommandRetryRequestSerializer,
    CommandSerializer,
    DiagnosticsSerializer,
    RuleExecutionSerializer,
    RuleSerializer,
    SchedulerSerializer,
    TimelineSerializer,
)
from automation.services.ingest import telemetry_accept
from automation.services.rules import rule_delete
from automation.services.support import (
    CommandRetryRefused,
    command_mark_failed,
    command_retry,
)
from automation.states import CommandOrigin, CommandStatus
from common.api import (
    ScopedViewSet,
    idempotent,
    request_scope,
)
from common.errors import Conflict
from common.filters import IdFilter
from common.pagination import NewestFirstCursor
from common.permissions import RoleCheckedWrites, need_scope
from common.roles import Need, action_roles
from common.tenancy import OrgScope, scope_filter
from devices.mqtt.messages import InboundTelemetry
from devices.selectors import devices_by_serial
from devices.serializers import IngestResultSerializer, TelemetryBatchSerializer
from scheduler.models import AutomationType, DueWork, TriggerType
from scheduler.states import SchedulerStatus


class RuleFilter(django_filters.FilterSet):
    farm = IdFilter(field_name="farm_id", help_text="only this farm's rules")

    class Meta:
        model = AutomationRule
        fields = ("farm",)


class CommandFilter(django_filters.FilterSet):
    status = django_filters.ChoiceFilter(choices=CommandStatus.choices)
    origin = django_filters.ChoiceFilter(choices=CommandOrigin.choices)
    device = IdFilter(field_name="target_device_id", help_text="target device id")
    rule = IdFilter(field_name="rule_id")

    class Meta:
        model = DeviceCommand
        fields = ("status", "origin", "device", "rule")


class RuleExecutionFilter(django_filters.FilterSet):
    rule = IdFilter(field_name="rule_id")

    class Meta:
        model = AutomationRuleExecution
        fields = ("rule",)


class SchedulerFilter(django_filters.FilterSet):
    farm = IdFilter(field_name="farm_id")
    status = django_filters.ChoiceFilter(choices=SchedulerStatus.choices)
    automation_type = django_filters.ChoiceFilter(choices=AutomationType.choices)
    trigger_type = django_filters.ChoiceFilter(choices=TriggerType.choices)

    class Meta:
        model = DueWork
        fields = ("farm", "status", "automation_type", "trigger_type")


_READ = ("list", "retrieve", "timeline")


@schema_docs.RULES
class RuleViewSet(
    RoleCheckedWrites,
    mixins.CreateModelMixin,
    mixins.UpdateModelMixin,
    mixins.DestroyModelMixin,
    viewsets.ReadOnlyModelViewSet,  # type: ignore[type-arg]
):
    """A farm's rules, checked like the safety gates on every write. A deleted rule
    (``rule_delete``) is not found afterwards; its executions and commands stay listed."""

    serializer_class = RuleSerializer
    queryset = AutomationRule.objects.none()
    filterset_class = RuleFilter
    required_roles = action_roles(
        read=_READ, configure=("create", "update", "partial_update", "destroy")
    )
    organization_path = "farm.organization_id"

    def get_queryset(self) -> QuerySet[AutomationRule]:
        """The rules not deleted, with the nested lists prefetched: a page of rules is read
        in a fixed number of queries, whatever its size."""
        rows = scope_filter(
            AutomationRule.objects.filter(deleted_at__isnull=True),
            request_scope(self.request),
            "farm__organization_id",
        )
        return rows.prefetch_related(
            Prefetch("conditions", AutomationRuleCondition.objects.order_by("pk")),
            Prefetch("actions", AutomationRuleAction.objects.order_by("pk")),
            Prefetch("schedules", AutomationRuleSchedule.objects.order_by("local_time")),
        ).order_by("pk")

    def get_serializer_context(self) -> dict[str, Any]:
        return {**super().get_serializer_context(), "scope": request_scope(self.request)}

    @idempotent()
    def create(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        return super().create(request, *args, **kwargs)

    def perform_destroy(self, instance: AutomationRule) -> None:
        """A concurrent ``DELETE`` that won leaves nothing for this one: a 404, as after it."""
        if not rule_delete(rule_id=instance.pk, actor=self.request.user.get_username()):
            raise NotFound()


@schema_docs.COMMANDS
class CommandViewSet(ScopedViewSet):
    """The commands sent to the caller's devices, newest first; support retries an ended
    one or marks a live one failed."""

    serializer_class = CommandSerializer
    queryset = DeviceCommand.objects.none()
    filterset_class = CommandFilter
    pagination_class = NewestFirstCursor
    required_roles = action_roles(read=_READ, operate=("retry", "mark_failed"))
    organization_path = "target_device.farm.organization_id"

    def scoped(self, scope: OrgScope) -> QuerySet[DeviceCommand]:
        return commands_visible(scope=scope).order_by("-pk")

    @extend_schema(responses=TimelineSerializer)
    @action(detail=True, methods=["get"])
    def timeline(self, request: Request, pk: str | None = None) -> Response:
        return Response(command_timeline(command=self.get_object()).as_dict())

    @idempotent(
        request=CommandRetryRequestSerializer,
        responses={201: CommandSerializer, 200: CommandSerializer},
    )
    @action(detail=True, methods=["post"])
    def retry(self, request: Request, pk: str | None = None) -> Response:
        """A new command for an ended one (201), or the live retry a repeat made (200); a
        command that has not ended is a 400."""
        command = self.get_object()
        body = CommandRetryRequestSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        try:
            result = command_retry(
                command_id=command.pk,
                actor=request.user.get_username(),
                reason=body.validated_data["reason"],
            )
        except CommandRetryRefused as exc:
            raise ValidationError({"non_field_errors": [str(exc)]}) from None
        code = status.HTTP_201_CREATED if result.created else status.HTTP_200_OK
        return Response(CommandSerializer(result.command).data, status=code)

    @extend_schema(
        request=CommandRetryRequestSerializer,
        responses={
            200: CommandSerializer,
            409: OpenApiResponse(description="conflict: the command has already ended"),
        },
    )
    @action(detail=True, methods=["post"], url_path="mark-failed", url_name="mark_failed")
    def mark_failed(self, request: Request, pk: str | None = None) -> Response:
        """End a live command as failed (reason ``manual``), freeing its endpoint; a command
        that has already ended is a 409 and nothing changes."""
        command = self.get_object()
        body = CommandRetryRequestSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        moved = command_mark_failed(
            command_id=command.pk,
            actor=request.user.get_username(),
            reason=body.validated_data["reason"],
        )
        if not moved:
            raise Conflict(f"the command is {command.status}: it has ended")
        return Response(CommandSerializer(self.get_object()).data)


@schema_docs.EXECUTIONS
class RuleExecutionViewSet(ScopedViewSet):
    """Every decision a rule made, newest first, with its timeline."""

    serializer_class = RuleExecutionSerializer
    queryset = AutomationRuleExecution.objects.none()
    filterset_class = RuleExecutionFilter
    pagination_class = NewestFirstCursor
    required_roles = action_roles(read=_READ)

    def scoped(self, scope: OrgScope) -> QuerySet[AutomationRuleExecution]:
        """Without the selector's joins: a row shows its relations' ids only, and a join to
        the partitioned events probes every partition for each row of a page."""
        return executions_visible(scope=scope).select_related(None).order_by("-pk")

    @extend_schema(responses=TimelineSerializer)
    @action(detail=True, methods=["get"])
    def timeline(self, request: Request, pk: str | None = None) -> Response:
        return Response(execution_timeline(execution=self.get_object()).as_dict())


@schema_docs.SCHEDULER
class SchedulerViewSet(ScopedViewSet):
    """Scoped through the row's farm: rows without a farm are visible to superusers only.

    Newest row first, like the other ledgers, not in due order: ``scheduled_on`` moves when a
    row is rescheduled (a cursor over it would skip or repeat rows) and many rows share one
    instant, and only the primary key orders every row of the table by an index."""

    serializer_class = SchedulerSerializer
    queryset = DueWork.objects.none()
    filterset_class = SchedulerFilter
    pagination_class = NewestFirstCursor
    required_roles = action_roles(read=_READ)

    def scoped(self, scope: OrgScope) -> QuerySet[DueWork]:
        rows = scope_filter(DueWork.objects.all(), scope, "farm__organization_id")
        return rows.order_by("-pk")


@schema_docs.DIAGNOSTICS
class DiagnosticsApi(APIView):
    """Commands retrying and uncertain, devices with the most ack timeouts (docs/spec.md §9)."""

    required_roles = {"get": Need.READ}

    @extend_schema(
        parameters=[OpenApiParameter("window_hours", float, description="default 24")],
        responses=DiagnosticsSerializer,
    )
    def get(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        try:
            hours = float(request.query_params.get("window_hours", "24"))
        except ValueError:
            hours = 24.0
        since = timezone.now() - timedelta(hours=max(0.0, min(hours, 24 * 90)))
        scope = request_scope(request)
        data: dict[str, Any] = {
            "retrying": commands_retrying(scope=scope),
            "uncertain": commands_uncertain(scope=scope, since=since),
            "top_timeouts": devices_top_timeouts(since=since, scope=scope),
        }
        serializer: BaseSerializer[Any] = DiagnosticsSerializer(data)
        return Response(serializer.data)


_UNKNOWN_SERIAL = OpenApiResponse(
    description="not_found: a serial number names no device of the caller's organisations; "
    "nothing of the batch was taken"
)


@schema_docs.TELEMETRY
class TelemetryIngestApi(APIView):
    """For HTTP gateways: the same ingest service (and guarantees) as the MQTT bridge.

    Every rejection is listed with its message's index and reason code (and recorded as a
    DeviceMessageRejection, as on MQTT): 202 when the batch kept at least one message (the
    rest are listed), 422 when every message was rejected, so nothing was taken. Only a
    ``gateway`` or an ``admin`` of the devices' organisation may post: a reading fires rules.
    """

    required_roles = {"post": Need.TELEMETRY}

    @idempotent(
        request=TelemetryBatchSerializer,
        responses={
            202: OpenApiResponse(IngestResultSerializer, "Kept; any rejection is listed."),
            422: OpenApiResponse(IngestResultSerializer, "Every message was rejected."),
            404: _UNKNOWN_SERIAL,
        },
    )
    def post(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        batch = TelemetryBatchSerializer(data=request.data)
        batch.is_valid(raise_exception=True)
        items = batch.validated_data["messages"]
        serials = {m["serial"] for m in items}
        scope = need_scope(request, Need.TELEMETRY)
        if devices_by_serial(serials=serials, scope=scope) != serials:
            raise NotFound("unknown device serial number")
        now = timezone.now()
        messages = [
            InboundTelemetry(
                serial=m["serial"],
                payload=m["payload"] if isinstance(m["payload"], str) else json.dumps(m["payload"]),
                received_at=m.get("received_at") or now,
            )
            for m in items
        ]
        result = telemetry_accept(messages=messages)
        body = {
            "telemetry": result.telemetry,
            "events": result.events,
            "rejections": result.rejections,
            "rejected": [asdict(r) for r in result.rejected],
        }
        dropped = {r.index for r in result.rejected if r.message_dropped}
        if len(dropped) == len(messages):
            return Response(body, status=status.HTTP_422_UNPROCESSABLE_ENTITY)
        return Response(body, status=status.HTTP_202_ACCEPTED)


router = SimpleRouter()
router.register("rules", RuleViewSet, basename="rule")
router.register("commands", CommandViewSet, basename="command")
router.register("executions", RuleExecutionViewSet, basename="execution")
router.register("scheduler", SchedulerViewSet, basename="scheduler")

urlpatterns = [
    path("telemetry/", TelemetryIngestApi.as_view(), name="telemetry-ingest"),
    path("diagnostics/", DiagnosticsApi.as_view(), name="diagnostics"),
    path("endpoints/<int:pk>/command/", EndpointCommandApi.as_view(), name="endpoint-command"),
    path(
        "endpoints/<int:pk>/hold/cancel/",
        EndpointHoldCancelApi.as_view(),
        name="endpoint-hold_cancel",  # one word after the basename, like every route name
    ),
    path("", include(router.urls)),
]
