"""Support's admin for reminders: settings, their sources (documents, endpoint metrics) and
report subscriptions. Read-mostly: configuration changes go through the API and the reminders
services (which re-derive scheduler rows), so these pages list, filter and open rows only.
Each list is scoped to the staff user's organisations unless superuser."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.db.models import Q, QuerySet
from django.http import HttpRequest

from common.admin import ReadOnlyAdmin
from common.tenancy import organization_scope
from reminders.models import Document, EndpointMetricSource, ReminderSetting, ReportSubscription


@admin.register(ReminderSetting)
class ReminderSettingAdmin(ReadOnlyAdmin):
    list_display = (
        "id",
        "name",
        "farm",
        "organization",
        "source_type",
        "trigger_type",
        "recipients_policy",
        "active",
        "revision",
        "updated_at",
    )
    list_filter = ("active", "source_type", "trigger_type", "recipients_policy")
    search_fields = ("name", "template_name", "threshold_metric")

    def get_queryset(self, request: HttpRequest) -> QuerySet[Any]:
        """A setting belongs to a farm or to a whole organisation: either path grants it."""
        rows = admin.ModelAdmin.get_queryset(self, request)
        scope = organization_scope(request.user)
        if scope is None:
            return rows
        ids = list(scope)
        return rows.filter(Q(farm__organization_id__in=ids) | Q(organization_id__in=ids))


@admin.register(Document)
class DocumentAdmin(ReadOnlyAdmin):
    org_path = "farm__organization_id"
    list_display = (
        "id",
        "title",
        "farm",
        "document_type",
        "subject_kind",
        "expires_on",
        "active",
        "revision",
    )
    list_filter = ("active", "document_type", "subject_kind")
    search_fields = ("title", "worker_name")
    date_hierarchy = "expires_on"


@admin.register(EndpointMetricSource)
class EndpointMetricSourceAdmin(ReadOnlyAdmin):
    org_path = "farm__organization_id"
    list_display = (
        "id",
        "metric_key",
        "farm",
        "endpoint",
        "aggregate",
        "window_minutes",
        "active",
        "revision",
    )
    list_filter = ("active", "aggregate")
    search_fields = ("metric_key",)
    raw_id_fields = ("endpoint",)


@admin.register(ReportSubscription)
class ReportSubscriptionAdmin(ReadOnlyAdmin):
    org_path = "farm__organization_id"
    list_display = (
        "id",
        "name",
        "farm",
        "recurrence",
        "send_time",
        "recipients_policy",
        "active",
        "updated_at",
    )
    list_filter = ("active", "recurrence", "recipients_policy")
    search_fields = ("name",)
