"""The two rules every support admin follows: organisation scoping (a staff user sees only
their organisations' rows unless superuser) and manual moves as actions that ask for a reason
and call a service, never a field edit. Also the admin of organisations and their members."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django import forms
from django.contrib import admin, messages
from django.db.models import Model, QuerySet
from django.http import HttpRequest
from django.template.response import TemplateResponse

from common.models import Organization, OrganizationMember
from common.tenancy import organization_scope, scope_filter


class OrgScopedAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    """Rows reach their organisation through ``org_path``; without one (tables that carry no
    organisation yet) only superusers see rows."""

    org_path: str | None = None

    def get_queryset(self, request: HttpRequest) -> QuerySet[Any]:
        rows = super().get_queryset(request)
        scope = organization_scope(request.user)
        if scope is None:
            return rows
        if self.org_path is None:
            return rows.none()
        return scope_filter(rows, scope, self.org_path)


class ReadOnlyAdmin(OrgScopedAdmin):
    """Ledger rows: listed, filtered and opened, changed only through actions."""

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        # Changelist actions need the change permission; an object page never saves fields.
        return obj is None and super().has_change_permission(request)


class ReasonForm(forms.Form):
    reason = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 3, "cols": 60}),
        max_length=400,
        help_text="Why: kept in the row's audit trail with your user name.",
    )


def reason_action(
    *, name: str, title: str, apply: Callable[[Model, str, str], bool]
) -> Callable[[Any, HttpRequest, QuerySet[Any]], TemplateResponse | None]:
    """An admin action that first asks for a required reason on an intermediate page, then
    calls ``apply(row, actor, reason)`` (a service) for each selected row."""

    def action(
        modeladmin: Any, request: HttpRequest, queryset: QuerySet[Any]
    ) -> TemplateResponse | None:
        form = ReasonForm(request.POST if "apply" in request.POST else None)
        if form.is_valid():
            actor = request.user.get_username()
            done = sum(1 for row in queryset if apply(row, actor, form.cleaned_data["reason"]))
            skipped = queryset.count() - done
            level = messages.SUCCESS if not skipped else messages.WARNING
            modeladmin.message_user(
                request, f"{title}: {done} done, {skipped} skipped (state had moved on)", level
            )
            return None
        context = {
            **modeladmin.admin_site.each_context(request),
            "title": title,
            "rows": list(queryset),
            "action": name,
            "form": form,
            "opts": modeladmin.model._meta,
        }
        return TemplateResponse(request, "admin/reason_action.html", context)

    action.__name__ = name
    action.short_description = title  # type: ignore[attr-defined]
    action.allowed_permissions = ("change",)  # type: ignore[attr-defined]
    return action


@admin.register(Organization)
class OrganizationAdmin(OrgScopedAdmin):
    org_path = "pk"
    list_display = ("id", "name", "created_at")
    search_fields = ("name",)


@admin.register(OrganizationMember)
class OrganizationMemberAdmin(OrgScopedAdmin):
    org_path = "organization_id"
    list_display = ("id", "user", "organization", "created_at")
    list_filter = ("organization",)
    search_fields = ("user__username",)
