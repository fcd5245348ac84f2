"""Reads of the devices domain, scoped to the organisations a user belongs to."""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from datetime import datetime

from django.db.models import Max, Min, Q, QuerySet, Sum

from common.tenancy import OrgScope, scope_filter
from devices.models import (
    BridgeHeartbeat,
    Device,
    DeviceInstanceEndpoint,
    DeviceProfile,
    Farm,
    Telemetry,
    TelemetryRollup,
    TelemetryRollupWatermark,
)


def farms_visible(*, scope: OrgScope) -> QuerySet[Farm]:
    return scope_filter(Farm.objects.all(), scope, "organization_id").order_by("pk")


def devices_visible(*, scope: OrgScope) -> QuerySet[Device]:
    rows = Device.objects.select_related("farm", "profile")
    return scope_filter(rows, scope, "farm__organization_id").order_by("pk")


def profiles_visible(*, scope: OrgScope) -> QuerySet[DeviceProfile]:
    """The profiles of the scope's organisations and the global ones (no organisation):
    another organisation's profile, its name included, is not there."""
    rows = DeviceProfile.objects.prefetch_related("endpoints").order_by("pk")
    if scope is None:
        return rows
    return rows.filter(Q(organization_id__in=list(scope)) | Q(organization__isnull=True))


def instance_endpoints_visible(*, scope: OrgScope) -> QuerySet[DeviceInstanceEndpoint]:
    rows = DeviceInstanceEndpoint.objects.select_related("device__farm", "profile_endpoint")
    return scope_filter(rows, scope, "device__farm__organization_id").order_by("pk")


def devices_by_serial(*, serials: Collection[str], scope: OrgScope) -> set[str]:
    """The serials among ``serials`` that belong to the scope (HTTP ingest's ownership check)."""
    rows = scope_filter(
        Device.objects.filter(serial_number__in=list(serials)), scope, "farm__organization_id"
    )
    return set(rows.values_list("serial_number", flat=True))


def bridge_heartbeat_latest() -> tuple[str, bool, datetime] | None:
    """(client id, connected, beat time) of the freshest bridge heartbeat, or None."""
    row = (
        BridgeHeartbeat.objects.order_by("-beat_at")
        .values_list("client_id", "connected", "beat_at")
        .first()
    )
    return None if row is None else (row[0], row[1], row[2])


def endpoint_rollups_hourly(
    *, endpoint_ids: Collection[int], start: datetime, end: datetime
) -> list[tuple[int, datetime, float, float]]:
    """(endpoint, hour start, lowest, highest) of each hour starting in [start, end), in hour
    order: one range read per endpoint on the (endpoint, hour) key."""
    rows = TelemetryRollup.objects.filter(
        endpoint_id__in=list(endpoint_ids), hour__gte=start, hour__lt=end
    ).order_by("hour", "endpoint_id")
    return list(rows.values_list("endpoint_id", "hour", "value_min", "value_max"))


@dataclass(frozen=True)
class EndpointReadings:
    """One endpoint's readings over a span, from its hourly rollups (bool as 0/1)."""

    endpoint_id: int
    device_serial: str
    key: str
    data_type: str
    count: int
    minimum: float
    maximum: float
    average: float


def farm_readings_summary(
    *, farm_id: int, start: datetime, end: datetime
) -> list[EndpointReadings]:
    """Each of the farm's rolled-up endpoints with readings in the hours starting in
    [start, end), by serial and key: one grouped query, whatever the span."""
    rows = (
        TelemetryRollup.objects.filter(
            endpoint__device__farm_id=farm_id, hour__gte=start, hour__lt=end
        )
        .values(
            "endpoint_id",
            "endpoint__device__serial_number",
            "endpoint__profile_endpoint__key",
            "endpoint__profile_endpoint__data_type",
        )
        .annotate(
            n=Sum("value_count"),
            low=Min("value_min"),
            high=Max("value_max"),
            total=Sum("value_sum"),
        )
        .order_by("endpoint__device__serial_number", "endpoint__profile_endpoint__key")
    )
    return [
        EndpointReadings(
            endpoint_id=r["endpoint_id"],
            device_serial=r["endpoint__device__serial_number"],
            key=r["endpoint__profile_endpoint__key"],
            data_type=r["endpoint__profile_endpoint__data_type"],
            count=r["n"],
            minimum=r["low"],
            maximum=r["high"],
            average=r["total"] / r["n"],
        )
        for r in rows
    ]


def telemetry_rollup_lag_s(*, now: datetime) -> float:
    """Seconds since the latest instant up to which every stored telemetry row is in the
    rollups; before the first complete pass, the age of the oldest row (0: none)."""
    covered = TelemetryRollupWatermark.objects.values_list("covered_at", flat=True).first()
    if covered is None:
        covered = Telemetry.objects.order_by("pk").values_list("received_at", flat=True).first()
    return 0.0 if covered is None else max(0.0, (now - covered).total_seconds())


def telemetry_rolled_up_through() -> int:
    """The highest telemetry id folded into the rollups (every lower one is too): a prune of
    raw telemetry keeps the rows above it."""
    mark = TelemetryRollupWatermark.objects.values_list("rolled_up_through", flat=True).first()
    return mark or 0
