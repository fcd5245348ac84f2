"""The execution-core part of the REST API (``/api/v1/``): telemetry ingest over HTTP (the
same ``telemetry_ingest`` service as the MQTT bridge), rules (validated like the safety
gates), command intents (read-only, plus support's manual retry of an ended command), an
operator's manual command on an endpoint and the cancel of its hold
(``automation.services.manual``), rule executions with their timelines, diagnostics, and the
scheduler table (read-only). Every row is scoped to the caller's organisations (else 404);
manual control needs an admin of the endpoint's organisation (else 403)."""

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
from rest_framework.permissions import IsAuthenticated
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.routers import SimpleRouter
from rest_framework.serializers import BaseSerializer
from rest_framework.views import APIView

from automation.diagnostics import (
    command_timeline,
    commands_retrying,
    commands_uncertain,
    devices_top_timeouts,
    execution_timeline,
    executions_visible,
    intents_visible,
)
from automation.models import (
    AutomationCommandIntent,
    AutomationRule,
    AutomationRuleAction,
    AutomationRuleCondition,
    AutomationRuleExecution,
    AutomationRuleSchedule,
    EndpointManualHold,
)
from automation.serializers import (
    CommandIntentSerializer,
    CommandRetryRequestSerializer,
    DiagnosticsSerializer,
    EndpointHoldSerializer,
    HoldCancelRequestSerializer,
    ManualCommandRequestSerializer,
    ManualCommandSerializer,
    RuleExecutionSerializer,
    RuleSerializer,
    SchedulerSerializer,
    TimelineSerializer,
)
from automation.services.ingest import telemetry_ingest
from automation.services.manual import (
    ManualCommandRefused,
    endpoint_command_manual,
    endpoint_hold_cancel,
)
from automation.services.support import CommandRetryRefused, command_intent_retry
from automation.states import CommandOrigin, CommandStatus
from common.api import (
    IDEMPOTENCY_HEADER,
    IDEMPOTENCY_PARAMETER,
    ScopedViewSet,
    idempotent_post,
    request_scope,
    require_org_admin,
)
from common.errors import Conflict
from common.filters import IdFilter
from common.tenancy import OrgScope, scope_filter
from devices.models import DeviceInstanceEndpoint
from devices.mqtt.messages import InboundTelemetry
from devices.selectors import devices_by_serial, instance_endpoints_visible
from devices.serializers import IngestResultSerializer, TelemetryBatchSerializer
from scheduler.models import AutomationScheduler, AutomationType, TriggerType
from scheduler.states import SchedulerStatus


class RuleFilter(django_filters.FilterSet):
    farm = IdFilter(field_name="farm_id", help_text="only this farm's rules")

    class Meta:
        model = AutomationRule
        fields = ("farm",)


class CommandIntentFilter(django_filters.FilterSet):
    status = django_filters.ChoiceFilter(choices=CommandStatus.choices)
    origin = django_filters.ChoiceFilter(choices=CommandOrigin.choices)
    device = IdFilter(field_name="target_device_id", help_text="target device id")
    rule = IdFilter(field_name="rule_id")

    class Meta:
        model = AutomationCommandIntent
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
        model = AutomationScheduler
        fields = ("farm", "status", "automation_type", "trigger_type")


class RuleViewSet(
    mixins.CreateModelMixin,
    mixins.UpdateModelMixin,
    viewsets.ReadOnlyModelViewSet,  # type: ignore[type-arg]
):
    serializer_class = RuleSerializer
    queryset = AutomationRule.objects.none()
    filterset_class = RuleFilter

    def get_queryset(self) -> QuerySet[AutomationRule]:
        """With the nested lists prefetched: a page of rules is read in a fixed number of
        queries, whatever its size."""
        rows = scope_filter(
            AutomationRule.objects.all(), request_scope(self.request), "farm__organization_id"
        )
        return rows.prefetch_related(
            Prefetch("conditions", AutomationRuleCondition.objects.order_by("pk")),
            Prefetch("actions", AutomationRuleAction.objects.order_by("pk")),
            Prefetch("schedules", AutomationRuleSchedule.objects.order_by("local_time")),
        ).order_by("pk")

    def get_serializer_context(self) -> dict[str, Any]:
        return {**super().get_serializer_context(), "scope": request_scope(self.request)}

    @extend_schema(parameters=[IDEMPOTENCY_PARAMETER])
    def create(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        return idempotent_post(request, lambda: super(RuleViewSet, self).create(request))


class CommandIntentViewSet(ScopedViewSet):
    serializer_class = CommandIntentSerializer
    queryset = AutomationCommandIntent.objects.none()
    filterset_class = CommandIntentFilter

    def scoped(self, scope: OrgScope) -> QuerySet[AutomationCommandIntent]:
        return intents_visible(scope=scope).order_by("-pk")

    @extend_schema(responses=TimelineSerializer)
    @action(detail=True, methods=["get"])
    def timeline(self, request: Request, pk: str | None = None) -> Response:
        return Response(command_timeline(intent=self.get_object()).as_dict())

    @extend_schema(
        request=CommandRetryRequestSerializer,
        responses={201: CommandIntentSerializer, 200: CommandIntentSerializer},
        parameters=[IDEMPOTENCY_PARAMETER],
    )
    @action(detail=True, methods=["post"])
    def retry(self, request: Request, pk: str | None = None) -> Response:
        """A new command for an ended one (201), or the live retry a repeat made (200); a
        command that has not ended is a 400."""
        return idempotent_post(request, lambda: self._retry(request))

    def _retry(self, request: Request) -> Response:
        intent = self.get_object()
        body = CommandRetryRequestSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        try:
            result = command_intent_retry(
                intent_id=intent.pk,
                actor=request.user.get_username(),
                reason=body.validated_data["reason"],
            )
        except CommandRetryRefused as exc:
            raise ValidationError({"non_field_errors": [str(exc)]}) from None
        code = status.HTTP_201_CREATED if result.created else status.HTTP_200_OK
        return Response(CommandIntentSerializer(result.intent).data, status=code)


class RuleExecutionViewSet(ScopedViewSet):
    serializer_class = RuleExecutionSerializer
    queryset = AutomationRuleExecution.objects.none()
    filterset_class = RuleExecutionFilter

    def scoped(self, scope: OrgScope) -> QuerySet[AutomationRuleExecution]:
        return executions_visible(scope=scope).order_by("-pk")

    @extend_schema(responses=TimelineSerializer)
    @action(detail=True, methods=["get"])
    def timeline(self, request: Request, pk: str | None = None) -> Response:
        return Response(execution_timeline(execution=self.get_object()).as_dict())


class SchedulerViewSet(ScopedViewSet):
    """Scoped through the row's farm: rows without a farm are visible to superusers only."""

    serializer_class = SchedulerSerializer
    queryset = AutomationScheduler.objects.none()
    filterset_class = SchedulerFilter

    def scoped(self, scope: OrgScope) -> QuerySet[AutomationScheduler]:
        rows = scope_filter(AutomationScheduler.objects.all(), scope, "farm__organization_id")
        return rows.order_by("scheduled_on", "pk")


class DiagnosticsApi(APIView):
    """Commands retrying and uncertain, devices with the most ack timeouts (docs/spec.md §9)."""

    permission_classes = [IsAuthenticated]

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


def _endpoint_for_write(request: Request, pk: int) -> DeviceInstanceEndpoint:
    """The caller's endpoint (another organisation's is a 404), if they administer it (403)."""
    rows = instance_endpoints_visible(scope=request_scope(request)).select_related("device__farm")
    endpoint = rows.filter(pk=pk).first()
    if endpoint is None:
        raise NotFound("no such endpoint")
    require_org_admin(request, endpoint.device.farm.organization_id)
    return endpoint


class EndpointCommandApi(APIView):
    """An operator sets the endpoint's value by hand: a ``manual`` command on the rules' own
    path (gates, one live command per endpoint, latest decision wins, applied only on the
    device's evidence), holding the endpoint against rules for the farm's
    ``manual_override_minutes``. 201 with the new command; 200 with the one an earlier request
    of the same ``Idempotency-Key`` made."""

    @extend_schema(
        request=ManualCommandRequestSerializer,
        responses={
            201: ManualCommandSerializer,
            200: ManualCommandSerializer,
            409: OpenApiResponse(description="conflict: the device is retired or in maintenance"),
        },
        parameters=[IDEMPOTENCY_PARAMETER],
    )
    def post(self, request: Request, pk: int) -> Response:
        return idempotent_post(request, lambda: self._command(request, pk))

    def _command(self, request: Request, pk: int) -> Response:
        endpoint = _endpoint_for_write(request, pk)
        body = ManualCommandRequestSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        try:
            result = endpoint_command_manual(
                endpoint_id=endpoint.pk,
                value=body.validated_data["value"],
                actor=request.user,
                reason=body.validated_data["reason"],
                request_key=request.headers.get(IDEMPOTENCY_HEADER, "").strip() or None,
            )
        except ManualCommandRefused as exc:
            if exc.conflict:
                raise Conflict(exc.message) from None
            raise ValidationError({exc.field: [exc.message]}) from None
        shown = {"command": result.intent, "manual_hold_until": result.hold_until}
        code = status.HTTP_201_CREATED if result.created else status.HTTP_200_OK
        return Response(ManualCommandSerializer(shown).data, status=code)


class EndpointHoldCancelApi(APIView):
    """End the endpoint's manual hold now: the rules decide its next reading. The command that
    held it keeps its course. 409 when no hold is active."""

    @extend_schema(
        request=HoldCancelRequestSerializer,
        responses={
            200: EndpointHoldSerializer,
            409: OpenApiResponse(description="conflict: the endpoint is not held"),
        },
    )
    def post(self, request: Request, pk: int) -> Response:
        endpoint = _endpoint_for_write(request, pk)
        body = HoldCancelRequestSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        reason = body.validated_data["reason"]
        if not endpoint_hold_cancel(endpoint_id=endpoint.pk, actor=request.user, reason=reason):
            raise Conflict("the endpoint is not held by a manual command")
        hold = EndpointManualHold.objects.select_related("requested_by", "cancelled_by").get(
            endpoint_id=endpoint.pk
        )
        return Response(EndpointHoldSerializer(hold).data)


def _enqueue_events(event_ids: list[int]) -> None:
    from automation.tasks import endpoint_events_enqueue

    endpoint_events_enqueue(event_ids)


class TelemetryIngestApi(APIView):
    """For HTTP gateways: the same ingest service (and guarantees) as the MQTT bridge.

    Every rejection is listed with its message's index and reason code (and recorded as a
    DeviceMessageRejection, as on MQTT): 202 when the batch kept at least one message (the
    rest are listed), 422 when every message was rejected, so nothing was taken.
    """

    @extend_schema(
        request=TelemetryBatchSerializer,
        responses={
            202: OpenApiResponse(IngestResultSerializer, "Kept; any rejection is listed."),
            422: OpenApiResponse(IngestResultSerializer, "Every message was rejected."),
        },
        parameters=[IDEMPOTENCY_PARAMETER],
    )
    def post(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        return idempotent_post(request, lambda: self._ingest(request))

    def _ingest(self, request: Request) -> Response:
        batch = TelemetryBatchSerializer(data=request.data)
        batch.is_valid(raise_exception=True)
        items = batch.validated_data["messages"]
        serials = {m["serial"] for m in items}
        if devices_by_serial(serials=serials, scope=request_scope(request)) != serials:
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
        result = telemetry_ingest(messages=messages, on_events=_enqueue_events)
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
router.register("commands", CommandIntentViewSet, basename="command")
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
