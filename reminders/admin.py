"""Support's admin for reminders: settings, their sources (documents, endpoint metrics) and
report subscriptions, users' scheduled messages (cancelled by an action through their service).
Read-mostly: configuration changes go through the API and the reminders
services (which re-derive scheduler rows), so these pages list, filter and open rows only.
Each list is scoped to the staff user's organisations unless superuser."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.contrib import admin
from django.db.models import Q, QuerySet
from django.http import HttpRequest

from common.admin import ReadOnlyAdmin, reason_action
from common.admin.columns import short_time, time_column
from common.tenancy import organization_scope
from reminders.models import (
    Document,
    EndpointMetricSource,
    ReminderSetting,
    ReportSubscription,
    UserMessage,
)
from reminders.selectors import user_messages_with_next_occurrence
from reminders.services.user_messages import user_message_cancel


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


def _user_message_cancel(row: Any, actor: str, reason: str) -> bool:
    return user_message_cancel(message_id=row.pk, actor=actor, reason=reason)


@admin.register(UserMessage)
class UserMessageAdmin(ReadOnlyAdmin):
    """Users' scheduled messages: written over the API; support lists them, sees the next
    send, and cancels through the service (pending sends deactivated, sent ones kept)."""

    org_path = "farm__organization_id"
    list_select_related = ("farm", "author")
    # The key columns fit a 1400 px screen: short headers and times.
    list_display = (
        "id",
        "subject",
        "farm",
        "author",
        "recurrence",
        "status",
        "next_occurrence",
        "last_sent",
        "version",
    )
    last_sent = time_column("last_occurrence_on", "last")
    list_filter = ("status", "recurrence", "recipients_policy")
    search_fields = ("subject", "guid")
    raw_id_fields = ("author", "recipient_users", "recipient_contacts")
    actions = (
        reason_action(
            name="cancel_user_messages", title="Cancel (pending sends)", apply=_user_message_cancel
        ),
    )

    def get_queryset(self, request: HttpRequest) -> QuerySet[Any]:
        return user_messages_with_next_occurrence(super().get_queryset(request))

    @admin.display(description="next", ordering="next_occurrence")
    def next_occurrence(self, row: UserMessage) -> str:
        found: datetime | None = row.next_occurrence  # type: ignore[attr-defined]
        return short_time(found)
