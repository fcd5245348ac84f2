"""Reads of organisations and memberships, and who may write for which organisation."""

from __future__ import annotations

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.db.models import QuerySet

from common.models import MemberRole, Organization, OrganizationMember
from common.tenancy import OrgScope, organization_scope, scope_filter


def organization_admin_scope(user: AbstractBaseUser | AnonymousUser) -> OrgScope:
    """The organisations ``user`` may write for: all for a superuser, those they are an admin
    of otherwise (none for anyone anonymous)."""
    return organization_scope(user, role=MemberRole.ADMIN)


def organizations_visible(*, scope: OrgScope) -> QuerySet[Organization]:
    return scope_filter(Organization.objects.all(), scope, "pk").order_by("pk")


def members_visible(*, scope: OrgScope) -> QuerySet[OrganizationMember]:
    rows = OrganizationMember.objects.select_related("user")
    return scope_filter(rows, scope, "organization_id").order_by("organization_id", "pk")
