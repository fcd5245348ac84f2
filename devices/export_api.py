"""``GET /api/v1/readings/export/``: a farm's raw readings over a window as a CSV stream
(``devices.export``). ``farm``, ``from`` and ``to`` are required, ``endpoint`` narrows it to one
of the farm's endpoints; a window longer than ``EXPORT_MAX_DAYS`` days, or any bad parameter,
is a 400 naming it, before a line is streamed. Viewers and above of the farm's organisation
export; another organisation's farm is a 404."""

from __future__ import annotations

from datetime import UTC, timedelta
from typing import Any

from django.conf import settings
from django.http import StreamingHttpResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import serializers
from rest_framework.exceptions import NotFound, ValidationError
from rest_framework.renderers import JSONRenderer
from rest_framework.request import Request

from common.permissions import need_scope
from common.renderers import CsvErrorsAsJson, CsvRenderer
from common.roles import Need
from common.validators import ID_MAX
from devices.export import EXPORT_HEADER, readings_csv, readings_export_plan
from devices.selectors import farms_visible


class ExportQuerySerializer(serializers.Serializer[Any]):
    """The query parameters (``from`` is no Python name: the fields are built here)."""

    def get_fields(self) -> dict[str, serializers.Field[Any, Any, Any, Any]]:
        return {
            "farm": serializers.IntegerField(
                min_value=1, max_value=ID_MAX, help_text="the farm whose readings to export"
            ),
            "endpoint": serializers.IntegerField(
                required=False,
                min_value=1,
                max_value=ID_MAX,
                help_text="only this endpoint of the farm; default: all of the farm's",
            ),
            "from": serializers.DateTimeField(
                help_text="the window's start, device time (ISO 8601), inclusive"
            ),
            "to": serializers.DateTimeField(
                help_text="the window's end, device time (ISO 8601), exclusive; at most "
                "EXPORT_MAX_DAYS days after from"
            ),
        }

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        span = attrs["to"] - attrs["from"]
        if span <= timedelta(0):
            raise ValidationError({"to": ["must be later than from"]})
        most = settings.EXPORT_MAX_DAYS
        if span > timedelta(days=most):
            raise ValidationError(
                {"to": [f"at most {most} days after from (EXPORT_MAX_DAYS); export in parts"]}
            )
        return attrs


class ReadingsCsvRenderer(CsvRenderer):
    """Declares the CSV this view streams itself (content negotiation and the schema); the
    lines are written by ``devices.export``."""

    header = EXPORT_HEADER


class ReadingsExportView(CsvErrorsAsJson):
    """A farm's readings as CSV, a line per value, streamed page by page."""

    required_roles = {"get": Need.READ}
    renderer_classes = [JSONRenderer, ReadingsCsvRenderer]

    @extend_schema(
        operation_id="readings_export",
        tags=["readings"],
        summary="Export a farm's readings as CSV",
        description=(
            "One line per value: the device time in UTC and in the farm's time zone (ISO "
            "8601), the device's serial, the endpoint's key and the value, oldest first. "
            "Streamed; the window is at most EXPORT_MAX_DAYS days (31 by default)."
        ),
        parameters=[ExportQuerySerializer],
        responses={
            (200, "text/csv"): OpenApiResponse(
                OpenApiTypes.STR, description="a header, then: " + ",".join(EXPORT_HEADER)
            ),
            400: OpenApiResponse(description="invalid: a parameter, named in fields"),
            404: OpenApiResponse(description="not_found: no farm of the caller's with this id"),
        },
    )
    def get(self, request: Request) -> StreamingHttpResponse:
        query = ExportQuerySerializer(data=request.query_params)
        query.is_valid(raise_exception=True)
        data = query.validated_data
        farms = farms_visible(scope=need_scope(request, Need.READ))
        farm = farms.filter(pk=data["farm"]).first()
        if farm is None:
            raise NotFound("No such farm.")
        export = readings_export_plan(
            farm=farm, endpoint_id=data.get("endpoint"), start=data["from"], end=data["to"]
        )
        if export is None:
            raise ValidationError({"endpoint": ["not an endpoint of this farm"]})
        stamp = f"{data['from'].astimezone(UTC):%Y%m%dT%H%M%SZ}"
        response = StreamingHttpResponse(
            readings_csv(export), content_type=f"{ReadingsCsvRenderer.media_type}; charset=utf-8"
        )
        response["Content-Disposition"] = (
            f'attachment; filename="readings-farm{farm.pk}-{stamp}.csv"'
        )
        return response
