"""Reads of the audit log."""

from __future__ import annotations

from django.db.models import QuerySet

from common.audit.models import AuditEntry
from common.tenancy import OrgScope, scope_filter


def audit_entries_visible(*, scope: OrgScope) -> QuerySet[AuditEntry]:
    """The entries of the organisations in ``scope``; a row of no organisation (an API
    token, a global profile) only for a superuser (``scope`` None)."""
    rows = AuditEntry.objects.select_related("content_type", "actor")
    return scope_filter(rows, scope, "organization_id").order_by("-pk")
