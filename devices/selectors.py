"""Reads of the devices domain, scoped to the organisations a user belongs to."""

from __future__ import annotations

from collections.abc import Collection
from datetime import datetime

from django.db.models import Q, QuerySet

from common.tenancy import OrgScope, scope_filter
from devices.models import BridgeHeartbeat, Device, DeviceInstanceEndpoint, DeviceProfile, Farm


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
