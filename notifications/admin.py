"""Support's admin for notifications: scoped to the staff user's organisations through the
notification's farm (farm-less operator alerts: superusers only), read-only rows with their
attempts and transitions inline, and "retry" / "cancel" as actions that ask for a reason and
call the support services (a compare-and-set move with the user and reason recorded)."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.http import HttpRequest

from common.admin import OrgScopedTabularInline, ReadOnlyAdmin, reason_action
from common.admin.columns import time_column
from notifications.models import Notification, NotificationAttempt, NotificationTransition
from notifications.services.support import notification_cancel, notification_retry


class _ReadOnlyInline(OrgScopedTabularInline):
    extra = 0
    can_delete = False

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


class NotificationAttemptInline(_ReadOnlyInline):
    model = NotificationAttempt
    ordering = ("attempt",)
    fields = ("attempt", "started_at", "latency_ms", "status_code", "outcome", "error")
    readonly_fields = fields


class NotificationTransitionInline(_ReadOnlyInline):
    model = NotificationTransition
    ordering = ("at", "pk")
    fields = ("at", "from_status", "to_status", "reason", "actor", "detail", "attempt")
    readonly_fields = fields


def _retry(row: Any, actor: str, reason: str) -> bool:
    return notification_retry(notification_id=row.pk, actor=actor, reason=reason)


def _cancel(row: Any, actor: str, reason: str) -> bool:
    return notification_cancel(notification_id=row.pk, actor=actor, reason=reason)


@admin.register(Notification)
class NotificationAdmin(ReadOnlyAdmin):
    org_path = "farm__organization_id"
    list_select_related = ("farm",)  # a nullable FK: the admin would not join it
    # The key columns fit a 1400 px screen: short headers and times.
    list_display = (
        "id",
        "source_key",
        "recipient_key",
        "channel",
        "farm",
        "state",
        "tries",
        "next_try",
    )
    next_try = time_column("next_attempt_at", "next try")

    @admin.display(description="status", ordering="status")
    def state(self, obj: Notification) -> str:
        """``Sent: Delivered``: the status and why, one column."""
        return f"{obj.get_status_display()}: {obj.get_status_reason_display()}"

    @admin.display(description="tries", ordering="attempt_count")
    def tries(self, obj: Notification) -> int:
        return obj.attempt_count

    list_filter = ("status", "channel", "status_reason")
    search_fields = ("source_key", "recipient_key", "address")
    date_hierarchy = "created_at"
    exclude = ("context", "attachments", "body_html")
    inlines = (NotificationAttemptInline, NotificationTransitionInline)
    actions = (
        reason_action(name="retry", title="Retry (failed or cancelled)", apply=_retry),
        reason_action(name="cancel", title="Cancel (queued or failed)", apply=_cancel),
    )
