"""Support's admin for the due-work table: rows are read-only and scoped through their farm;
holds, retries and cancels are actions that ask for a reason and call
``scheduler.services.support``."""

from __future__ import annotations

from typing import Any

from django.contrib import admin

from common.admin import OrgScopedTabularInline, ReadOnlyAdmin, reason_action
from scheduler.models import AutomationScheduler, AutomationSchedulerTransition
from scheduler.services.support import (
    scheduler_support_cancel,
    scheduler_support_release,
    scheduler_support_retry_now,
)


class SchedulerTransitionInline(OrgScopedTabularInline):
    model = AutomationSchedulerTransition
    extra = 0
    can_delete = False
    ordering = ("at", "pk")
    readonly_fields = ("at", "from_status", "to_status", "reason_code", "version", "detail")
    fields = readonly_fields

    def has_add_permission(self, request: Any, obj: Any = None) -> bool:
        return False


def _release(row: Any, actor: str, reason: str) -> bool:
    return scheduler_support_release(scheduler_id=row.pk, actor=actor, reason=reason)


def _retry_now(row: Any, actor: str, reason: str) -> bool:
    return scheduler_support_retry_now(scheduler_id=row.pk, actor=actor, reason=reason)


def _cancel(row: Any, actor: str, reason: str) -> bool:
    return scheduler_support_cancel(scheduler_id=row.pk, actor=actor, reason=reason)


@admin.register(AutomationScheduler)
class AutomationSchedulerAdmin(ReadOnlyAdmin):
    # Scoped through the row's farm: rows without a farm are visible to superusers only.
    org_path = "farm__organization_id"
    list_select_related = ("farm",)  # a nullable FK: the admin would not join it
    list_display = (
        "id",
        "scheduler_key",
        "farm",
        "automation_type",
        "trigger_type",
        "status",
        "is_on_support_hold",
        "scheduled_on",
        "retry_count",
        "next_retry_on",
        "failure_reason_code",
    )
    list_filter = (
        "status",
        "automation_type",
        "trigger_type",
        "is_on_support_hold",
        ("farm", admin.RelatedOnlyFieldListFilter),
    )
    search_fields = ("scheduler_key",)
    inlines = (SchedulerTransitionInline,)
    actions = (
        reason_action(name="release_hold", title="Release support hold", apply=_release),
        reason_action(name="retry_now", title="Retry now", apply=_retry_now),
        reason_action(name="cancel", title="Cancel", apply=_cancel),
    )
