"""Manual control over the API: an operator sets an endpoint's value (a ``manual`` command on
the rules' own path, holding the endpoint against rules) or ends its hold
(``automation.services.manual``). Needs the ``operator`` role in the endpoint's
organisation."""

from __future__ import annotations

from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import status
from rest_framework.exceptions import NotFound, ValidationError
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from automation import schema_docs
from automation.models import EndpointManualHold
from automation.serializers import (
    EndpointHoldSerializer,
    HoldCancelRequestSerializer,
    ManualCommandRequestSerializer,
    ManualCommandSerializer,
)
from automation.services.manual import (
    ManualCommandRefused,
    endpoint_command_manual,
    endpoint_hold_cancel,
)
from automation.services.run_limits import RunLimitInvalid
from common.api import IDEMPOTENCY_HEADER, idempotent, request_scope
from common.errors import Conflict
from common.roles import Need
from devices.models import DeviceInstanceEndpoint
from devices.selectors import instance_endpoints_visible


class _EndpointOperation(APIView):
    """An operator's move on one endpoint of their organisation."""

    required_roles = {"post": Need.OPERATE}
    organization_path = "device.farm.organization_id"

    def endpoint(self, request: Request, pk: int) -> DeviceInstanceEndpoint:
        """The caller's endpoint (another organisation's is a 404), if their role there may
        operate it (else 403)."""
        rows = instance_endpoints_visible(scope=request_scope(request))
        endpoint = rows.select_related("device__farm").filter(pk=pk).first()
        if endpoint is None:
            raise NotFound("no such endpoint")
        self.check_object_permissions(request, endpoint)
        return endpoint


@schema_docs.ENDPOINT_COMMAND
class EndpointCommandApi(_EndpointOperation):
    """An operator sets the endpoint's value by hand: a ``manual`` command on the rules' own
    path (gates, one live command per endpoint, latest decision wins, applied only on the
    device's evidence), holding the endpoint against rules for the farm's
    ``manual_override_minutes``. 201 with the new command; 200 with the one an earlier request
    of the same ``Idempotency-Key`` made. With ``max_on_s``, the command is followed, that long
    after it applied, by one back to ``max_on_value`` or the endpoint's safe value."""

    @idempotent(
        request=ManualCommandRequestSerializer,
        responses={
            201: ManualCommandSerializer,
            200: ManualCommandSerializer,
            409: OpenApiResponse(description="conflict: the device is retired or in maintenance"),
        },
    )
    def post(self, request: Request, pk: int) -> Response:
        endpoint = self.endpoint(request, pk)
        body = ManualCommandRequestSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        try:
            result = endpoint_command_manual(
                endpoint_id=endpoint.pk,
                value=body.validated_data["value"],
                actor=request.user,
                reason=body.validated_data["reason"],
                request_key=request.headers.get(IDEMPOTENCY_HEADER, "").strip() or None,
                max_on_s=body.validated_data.get("max_on_s"),
                max_on_value=body.validated_data.get("max_on_value"),
            )
        except ManualCommandRefused as exc:
            if exc.conflict:
                raise Conflict(exc.message) from None
            raise ValidationError({exc.field: [exc.message]}) from None
        except RunLimitInvalid as exc:
            raise ValidationError({f: [m] for f, m in exc.errors.items()}) from None
        shown = {"command": result.command, "manual_hold_until": result.hold_until}
        code = status.HTTP_201_CREATED if result.created else status.HTTP_200_OK
        return Response(ManualCommandSerializer(shown).data, status=code)


@schema_docs.ENDPOINT_HOLD_CANCEL
class EndpointHoldCancelApi(_EndpointOperation):
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
        endpoint = self.endpoint(request, pk)
        body = HoldCancelRequestSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        reason = body.validated_data["reason"]
        if not endpoint_hold_cancel(endpoint_id=endpoint.pk, actor=request.user, reason=reason):
            raise Conflict("the endpoint is not held by a manual command")
        hold = EndpointManualHold.objects.select_related("requested_by", "cancelled_by").get(
            endpoint_id=endpoint.pk
        )
        return Response(EndpointHoldSerializer(hold).data)
