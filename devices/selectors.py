"""Reads of the devices domain, scoped to the organisations a user belongs to."""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from datetime import datetime

from django.db.models import Count, Max, Min, Q, QuerySet, Sum

from common.tenancy import OrgScope, scope_filter
from devices.models import (
    BridgeProcess,
    BridgeSlot,
    Device,
    DeviceInstanceEndpoint,
    DeviceProfile,
    DeviceStatus,
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


@dataclass(frozen=True)
class BridgeSlotState:
    """One bridge slot's row as read: who holds it, until when, and its bridge's last beat."""

    slot: int
    client_id: str
    holder: str
    lease_until: datetime | None
    unheld_since: datetime | None
    held_since: datetime | None
    beat_at: datetime | None
    connected: bool
    version: int

    def held(self, now: datetime) -> bool:
        """A holder whose lease has not run out (a dead holder's lapses on its own)."""
        return bool(self.holder) and self.lease_until is not None and self.lease_until >= now

    def unheld_s(self, now: datetime) -> float:
        """Seconds with no live holder: since the release, or since a dead holder's lease
        ran out; 0 while held."""
        if self.held(now):
            return 0.0
        since = self.unheld_since if not self.holder else self.lease_until
        return max(0.0, (now - since).total_seconds()) if since is not None else 0.0


_SLOT_FIELDS = (
    "slot", "client_id", "holder", "lease_until", "unheld_since", "held_since", "beat_at",
    "connected", "version",
)  # fmt: skip


def bridge_slots_read(*, client_ids: Collection[str]) -> list[BridgeSlotState]:
    """The rows of these slots, by slot number (a slot never made is not there)."""
    rows = BridgeSlot.objects.filter(client_id__in=list(client_ids)).order_by("slot", "client_id")
    return [BridgeSlotState(*row) for row in rows.values_list(*_SLOT_FIELDS)]


def bridge_slots_held_count(*, client_ids: Collection[str], now: datetime) -> dict[str, int]:
    """Slots held under a live lease, per holder (the fair-share comparison)."""
    rows = (
        BridgeSlot.objects.filter(client_id__in=list(client_ids), lease_until__gte=now)
        .exclude(holder="")
        .values_list("holder")
        .annotate(n=Count("pk"))
    )
    return {holder: n for holder, n in rows}


def bridge_processes_live(*, seen_since: datetime) -> set[str]:
    """The bridge processes that beat since ``seen_since``, standbys included."""
    rows = BridgeProcess.objects.filter(seen_at__gte=seen_since)
    return set(rows.values_list("holder", flat=True))


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


def devices_offline_count() -> int:
    """Devices heard from once, silent past their window since, not retired: the condition
    of the partial index ``device_offline``, so the count reads that index only."""
    return (
        Device.objects.filter(online=False, last_seen_at__isnull=False)
        .exclude(status=DeviceStatus.RETIRED)
        .count()
    )
