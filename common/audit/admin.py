"""The audit log in the admin: a read-only list, each entry's changes on its page. A staff
user sees the entries of the organisations they are an admin of, like the API; django-
auditlog's own admin page (unscoped) is replaced by this one."""

from __future__ import annotations

from typing import Any

from auditlog.mixins import LogEntryAdminMixin
from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest

from common.admin import OrgScopedAdmin
from common.audit.models import AuditEntry
from common.roles import Need

if admin.site.is_registered(AuditEntry):
    admin.site.unregister(AuditEntry)


@admin.register(AuditEntry)
class AuditEntryAdmin(LogEntryAdminMixin, OrgScopedAdmin):
    org_path = "organization_id"
    date_hierarchy = "timestamp"
    list_select_related = ("content_type", "actor")
    list_display = ("created", "resource_url", "action", "surface", "msg_short", "user_url")
    list_filter = ("action", "surface")
    search_fields = ("object_repr",)
    readonly_fields = ("created", "resource_url", "action", "surface", "user_url", "msg")
    fieldsets = [
        (None, {"fields": ["created", "user_url", "resource_url", "surface"]}),
        ("Changes", {"fields": ["action", "msg"]}),
    ]

    def get_queryset(self, request: HttpRequest) -> QuerySet[Any]:
        rows = self.model._default_manager.all()
        return self.rows_meeting(request, Need.CONFIGURE, rows)

    def has_add_permission(self, request: HttpRequest, *args: Any) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False
