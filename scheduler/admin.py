"""Support's admin for the due-work table: rows are read-only and scoped through their farm;
holds, retries and cancels are actions that ask for a reason and call
``scheduler.services.support``. A row's page links to its execution trace (read-only records,
scoped by the organisation copied onto each) and streams its trace blob through the storage
API to staff who may see the row."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.db.models import Model
from django.http import FileResponse, Http404, HttpRequest
from django.urls import URLPattern, path, reverse
from django.utils.html import format_html, format_html_join

from common.admin import OrgScopedTabularInline, ReadOnlyAdmin, reason_action
from common.admin.columns import time_column
from scheduler.models import DueWork, DueWorkTransition, TraceRecord
from scheduler.services.support import (
    scheduler_support_cancel,
    scheduler_support_release,
    scheduler_support_retry_now,
)
from scheduler.trace_storage import trace_blob_content_type, trace_blob_open


class SchedulerTransitionInline(OrgScopedTabularInline):
    model = DueWorkTransition
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


class TraceBlobAdmin(ReadOnlyAdmin):
    """An admin whose rows name a trace blob: ``<id>/trace-blob/`` streams it, for a user who
    may view the row (another organisation's row does not exist: 404)."""

    def get_urls(self) -> list[URLPattern]:
        meta = self.model._meta
        view = self.admin_site.admin_view(self.trace_blob_view)
        name = f"{meta.app_label}_{meta.model_name}_trace_blob"
        return [path("<path:object_id>/trace-blob/", view, name=name), *super().get_urls()]

    def trace_blob_view(self, request: HttpRequest, object_id: str) -> FileResponse:
        row = self.get_object(request, object_id)
        if row is None or not self.has_view_permission(request, row):
            raise Http404("no such row")
        name = str(getattr(row, "trace_blob_name", ""))
        blob = trace_blob_open(name) if name else None
        if blob is None:
            raise Http404("no trace blob (none written, or pruned)")
        content_type = trace_blob_content_type(name)
        return FileResponse(
            blob,
            content_type=content_type,
            as_attachment=not content_type.startswith(("application/json", "text/")),
            filename=name.rpartition("/")[2],
        )

    def trace_blob_link(self, obj: Model) -> str:
        name = str(getattr(obj, "trace_blob_name", ""))
        if not name or obj.pk is None:
            return "—"
        meta = self.model._meta
        url = reverse(f"admin:{meta.app_label}_{meta.model_name}_trace_blob", args=[obj.pk])
        return format_html('<a href="{}">{}</a>', url, name)


@admin.register(DueWork)
class DueWorkAdmin(TraceBlobAdmin):
    # Scoped through the row's farm: rows without a farm are visible to superusers only.
    org_path = "farm__organization_id"
    list_select_related = ("farm",)  # a nullable FK: the admin would not join it
    # The key columns fit a 1400 px screen: short headers and times; the trigger type and
    # the farm are filters.
    list_display = (
        "id",
        "scheduler_key",
        "kind",
        "status",
        "hold",
        "due",
        "tries",
        "next_try",
        "reason",
    )
    list_filter = (
        "status",
        "automation_type",
        "trigger_type",
        "is_on_support_hold",
        ("farm", admin.RelatedOnlyFieldListFilter),
    )
    search_fields = ("scheduler_key",)
    readonly_fields = ("trace_links",)
    inlines = (SchedulerTransitionInline,)
    actions = (
        reason_action(name="release_hold", title="Release support hold", apply=_release),
        reason_action(name="retry_now", title="Retry now", apply=_retry_now),
        reason_action(name="cancel", title="Cancel", apply=_cancel),
    )

    due = time_column("scheduled_on", "due")
    next_try = time_column("next_retry_on", "next try")

    @admin.display(description="type", ordering="automation_type")
    def kind(self, obj: DueWork) -> str:
        return obj.get_automation_type_display()

    @admin.display(description="hold", boolean=True, ordering="is_on_support_hold")
    def hold(self, obj: DueWork) -> bool:
        return obj.is_on_support_hold

    @admin.display(description="tries", ordering="retry_count")
    def tries(self, obj: DueWork) -> int:
        return obj.retry_count

    @admin.display(description="reason", ordering="failure_reason_code")
    def reason(self, obj: DueWork) -> str:
        return obj.failure_reason_code

    @admin.display(description="trace")
    def trace_links(self, obj: DueWork) -> str:
        """Its execution records (another store: never read to find work) and its blob."""
        records = reverse("admin:scheduler_tracerecord_changelist")
        links = [(f"{records}?scheduler_id={obj.pk}", "execution records")]
        if obj.trace_blob_name:
            blob = reverse("admin:scheduler_duework_trace_blob", args=[obj.pk])
            links.append((blob, f"trace blob {obj.trace_blob_name}"))
        return format_html_join(" · ", '<a href="{}">{}</a>', links)


@admin.register(TraceRecord)
class TraceRecordAdmin(TraceBlobAdmin):
    """The execution trace, opened from a row's page (``?scheduler_id=<id>``); scoped by the
    organisation each record carries, so it needs no join to the coordination table."""

    org_path = "organization_id"
    list_display = (
        "id",
        "row",
        "scheduler_key",
        "token",
        "attempt",
        "outcome",
        "reason",
        "started",
        "ms",
        "worker",
    )
    list_filter = ("outcome", "automation_type")
    search_fields = ("scheduler_key",)
    ordering = ("-finished_at",)  # its index; a row's records come through the unique key
    show_full_result_count = False  # a filtered page never counts the whole trace
    readonly_fields = ("scheduler_link", "trace_blob")

    started = time_column("started_at", "started")

    @admin.display(description="row", ordering="scheduler_id")
    def row(self, obj: TraceRecord) -> int:
        return obj.scheduler_id

    @admin.display(description="ms", ordering="duration_ms")
    def ms(self, obj: TraceRecord) -> int | None:
        return obj.duration_ms

    @admin.display(description="scheduler row")
    def scheduler_link(self, obj: TraceRecord) -> str:
        url = reverse("admin:scheduler_duework_change", args=[obj.scheduler_id])
        return format_html('<a href="{}">#{}</a>', url, obj.scheduler_id)

    @admin.display(description="trace blob")
    def trace_blob(self, obj: TraceRecord) -> str:
        return self.trace_blob_link(obj)
