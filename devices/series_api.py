"""The API's shapes of ``GET /api/v1/endpoints/<id>/series/`` (``devices.series``): its query
parameters, checked into a window (a bad one is a 400 naming the parameter), and its answer,
as JSON or, with ``?format=csv``, as CSV: one line per bucket with the JSON points' fields.

``from``/``to`` are ISO 8601 times (default: the 24 hours before now), ``bucket`` a width in
whole seconds, as a number (``300``) or an ISO 8601 duration (``PT5M``); by default the
narrowest that keeps the window within ``SERIES_MAX_POINTS`` buckets. The answer names the
window as served (widened to whole buckets) and the bucket in seconds."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from django.utils.dateparse import parse_duration
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiResponse
from rest_framework import serializers
from rest_framework.exceptions import ValidationError

from common.renderers import CsvRenderer
from common.serializers import StrictCharField
from devices.models import DeviceInstanceEndpoint
from devices.series import (
    NUMERIC_TYPES,
    SERIES_MAX_POINTS,
    SeriesRefused,
    endpoint_series,
    series_window,
)

_BUCKET_HELP = (
    "bucket width in whole seconds: a number (300) or an ISO 8601 duration (PT5M); default: "
    f"the narrowest that keeps the window within {SERIES_MAX_POINTS} buckets. A whole number "
    "of hours reads the hourly rollups (kept for years, a minute or two behind), any other "
    "width the readings themselves (kept RETENTION_ENDPOINT_EVENTS_DAYS). A whole number of "
    "days (P1D) is the farm's local days, from its midnight: 23 or 25 hours on a DST change"
)


class BucketField(StrictCharField):
    """A positive whole number of seconds, written as digits or an ISO 8601 duration."""

    default_error_messages = {
        "invalid": "Seconds (300) or an ISO 8601 duration (PT5M), at least 1 second.",
        "fraction": "Whole seconds only.",
    }

    def to_internal_value(self, data: Any) -> int:  # type: ignore[override]
        text = super().to_internal_value(data).strip()
        if text.isascii() and text.isdigit() and len(text) <= 12:
            seconds = int(text)
        elif text[:1] in ("P", "p"):
            seconds = self._iso_seconds(text)
        else:
            self.fail("invalid")
        if seconds < 1:
            self.fail("invalid")
        return seconds

    def _iso_seconds(self, text: str) -> int:
        try:
            duration = parse_duration(text.upper())
        except (OverflowError, ValueError):
            duration = None
        if duration is None:
            self.fail("invalid")
        if duration % timedelta(seconds=1):
            self.fail("fraction")
        return int(duration.total_seconds())


class SeriesQuerySerializer(serializers.Serializer[Any]):
    """The query parameters (``from`` is no Python name: the fields are built here)."""

    def get_fields(self) -> dict[str, serializers.Field[Any, Any, Any, Any]]:
        return {
            "from": serializers.DateTimeField(
                required=False, help_text="the window's start (ISO 8601); default: to - 24 h"
            ),
            "to": serializers.DateTimeField(
                required=False, help_text="the window's end, exclusive (ISO 8601); default: now"
            ),
            "bucket": BucketField(required=False, help_text=_BUCKET_HELP),
        }


class SeriesPointSerializer(serializers.Serializer[Any]):
    def get_fields(self) -> dict[str, serializers.Field[Any, Any, Any, Any]]:
        return {
            "t": serializers.DateTimeField(read_only=True, help_text="the bucket's start"),
            "min": serializers.FloatField(read_only=True),
            "max": serializers.FloatField(read_only=True),
            "avg": serializers.FloatField(read_only=True),
            "last": serializers.FloatField(read_only=True, help_text="the bucket's latest reading"),
            "count": serializers.IntegerField(read_only=True, help_text="readings in the bucket"),
        }


class SeriesSerializer(serializers.Serializer[Any]):
    """An endpoint's readings per bucket; buckets without readings are left out."""

    def get_fields(self) -> dict[str, serializers.Field[Any, Any, Any, Any]]:
        return {
            "endpoint": serializers.IntegerField(read_only=True),
            "from": serializers.DateTimeField(
                read_only=True, help_text="the first bucket's start (from, widened)"
            ),
            "to": serializers.DateTimeField(
                read_only=True, help_text="the last bucket's end (to, widened)"
            ),
            "bucket": serializers.IntegerField(read_only=True, help_text="width in seconds"),
            "source": serializers.CharField(
                read_only=True, help_text="readings, or hourly_rollups for whole-hour buckets"
            ),
            "points": SeriesPointSerializer(many=True, read_only=True),
        }


class SeriesCsvRenderer(CsvRenderer):
    """The series' buckets as CSV, a line per point with the same fields and values as the
    JSON answer's ``points`` (times in UTC, as there)."""

    header = ("t", "min", "max", "avg", "last", "count")

    def rows(self, data: Any) -> list[list[Any]]:
        return [[point[name] for name in self.header] for point in data["points"]]


SERIES_RESPONSES = {
    (200, "application/json"): SeriesSerializer,
    (200, "text/csv"): OpenApiResponse(
        OpenApiTypes.STR,
        description="?format=csv: a header, then a line per bucket: "
        + ",".join(SeriesCsvRenderer.header),
    ),
    400: OpenApiResponse(description="invalid: a parameter, named in fields"),
}


def endpoint_series_answer(
    endpoint: DeviceInstanceEndpoint, params: Any, *, now: datetime
) -> dict[str, Any]:
    """The series body for ``params`` (a query dict); ValidationError naming the parameter,
    or ``endpoint`` for an endpoint with no numeric readings (an enum)."""
    query = SeriesQuerySerializer(data=params)
    query.is_valid(raise_exception=True)
    data = query.validated_data
    data_type = endpoint.profile_endpoint.data_type
    if data_type not in NUMERIC_TYPES:
        detail = f"a {data_type} endpoint has no numeric readings (numbers, booleans as 0/1)"
        raise ValidationError({"endpoint": [detail]})
    try:
        window = series_window(
            start=data.get("from"),
            end=data.get("to"),
            bucket_s=data.get("bucket"),
            now=now,
            time_zone=endpoint.device.farm.time_zone,
        )
    except SeriesRefused as exc:
        raise ValidationError({exc.field: [exc.message]}) from None
    points = endpoint_series(endpoint=endpoint, window=window)
    body = {
        "endpoint": endpoint.pk,
        "from": window.start,
        "to": window.end,
        "bucket": window.bucket_s,
        "source": "hourly_rollups" if window.from_rollups else "readings",
        "points": [
            {
                "t": p.at,
                "min": p.low,
                "max": p.high,
                "avg": p.mean,
                "last": p.last,
                "count": p.count,
            }
            for p in points
        ],
    }
    answer: dict[str, Any] = SeriesSerializer(body).data
    return answer
