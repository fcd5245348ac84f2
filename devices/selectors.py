"""Reads of the devices domain, scoped to the organisations a user belongs to: the admin and
the API call these, so another organisation's rows are simply not there (a 404, not a 403)."""

from __future__ import annotations

from collections.abc import Collection
from datetime import datetime

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.db.models import QuerySet

from devices.models import (
    BridgeHeartbeat,
    Device,
    DeviceInstanceEndpoint,
    DeviceProfile,
    Farm,
    OrganizationMember,
)

# ``None`` means "every organisation" (a superuser); otherwise the ids the user belongs to.
OrgScope = frozenset[int] | None


def organization_scope(user: AbstractBaseUser | AnonymousUser) -> OrgScope:
    """The organisations ``user`` may see: all for a superuser, none for anyone anonymous."""
    if not getattr(user, "is_authenticated", False):
        return frozenset()
    if getattr(user, "is_superuser", False):
        return None
    user_id: int = user.pk  # type: ignore[assignment]  # authenticated: always saved
    return frozenset(
        OrganizationMember.objects.filter(user_id=user_id).values_list("organization_id", flat=True)
    )


def scope_filter(rows: QuerySet, scope: OrgScope, path: str) -> QuerySet:  # type: ignore[type-arg]
    """Keep only rows whose organisation (reached through ``path``) is in ``scope``."""
    if scope is None:
        return rows
    return rows.filter(**{f"{path}__in": list(scope)})


def farms_visible(*, scope: OrgScope) -> QuerySet[Farm]:
    return scope_filter(Farm.objects.all(), scope, "organization_id").order_by("pk")


def devices_visible(*, scope: OrgScope) -> QuerySet[Device]:
    rows = Device.objects.select_related("farm", "profile")
    return scope_filter(rows, scope, "farm__organization_id").order_by("pk")


def profiles_visible(*, scope: OrgScope) -> QuerySet[DeviceProfile]:
    """Profiles are a shared catalogue: a member sees those their organisations' devices use."""
    rows = DeviceProfile.objects.prefetch_related("endpoints").order_by("pk")
    if scope is None:
        return rows
    return rows.filter(devices__farm__organization_id__in=list(scope)).distinct()


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
