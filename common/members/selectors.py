"""Reads of organisations and memberships."""

from __future__ import annotations

from django.db.models import QuerySet

from common.models import Organization, OrganizationMember
from common.tenancy import OrgScope, scope_filter


def organizations_visible(*, scope: OrgScope) -> QuerySet[Organization]:
    return scope_filter(Organization.objects.all(), scope, "pk").order_by("pk")


def members_visible(*, scope: OrgScope) -> QuerySet[OrganizationMember]:
    rows = OrganizationMember.objects.select_related("user")
    return scope_filter(rows, scope, "organization_id").order_by("organization_id", "pk")
