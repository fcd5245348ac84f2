"""Support's command list: what is wrong first (status, reason, age), a filter for commands
stuck live, and on a command's page its timeline and the retry / mark-failed buttons. The
buttons post the list's own actions, so a move asks for a reason and goes through
``automation.services.support`` (a guarded update with an audit row) exactly as from the list."""

from __future__ import annotations

from datetime import timedelta
from functools import partial
from typing import Any

from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest
from django.urls import path, reverse
from django.utils import timezone
from django.utils.html import format_html
from django.utils.safestring import SafeString

from automation.admin.diagnostics import diagnostics_view
from automation.admin.ledger import timeline_html
from automation.diagnostics import command_timeline
from automation.models import DeviceCommand
from automation.services.support import (
    CommandRetryRefused,
    command_intent_mark_failed,
    command_intent_retry,
)
from automation.states import COMMAND_LIVE, COMMAND_TERMINAL
from common.admin import ReadOnlyAdmin, reason_action

STUCK_AFTER_MIN = (5, 15, 60)


def age_text(seconds: float) -> str:
    """``42s``, ``7m 05s``, ``3h 02m``, ``2d 04h``: the largest two units."""
    s = max(0, int(seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m {s % 60:02d}s"
    if s < 86400:
        return f"{s // 3600}h {s % 3600 // 60:02d}m"
    return f"{s // 86400}d {s % 86400 // 3600:02d}h"


class StuckFilter(admin.SimpleListFilter):
    """Commands still live (not ended, see ``automation.states.COMMAND_LIVE``) that were
    created more than N minutes ago: what should have reached the device by now."""

    title = "live for more than"
    parameter_name = "stuck_min"

    def lookups(self, request: Any, model_admin: Any) -> list[tuple[str, str]]:
        return [(str(m), f"{m} minutes") for m in STUCK_AFTER_MIN]

    def queryset(self, request: Any, queryset: QuerySet[DeviceCommand]) -> Any:
        value = self.value()
        if value is None or not value.isdigit() or int(value) not in STUCK_AFTER_MIN:
            return queryset
        since = timezone.now() - timedelta(minutes=int(value))
        return queryset.filter(status__in=COMMAND_LIVE, created_at__lt=since)


def _mark_failed(row: Any, actor: str, reason: str) -> bool:
    return command_intent_mark_failed(intent_id=row.pk, actor=actor, reason=reason)


def _retry(row: Any, actor: str, reason: str) -> bool:
    """Counted as done only when a new attempt was created; a live command is skipped."""
    try:
        return command_intent_retry(intent_id=row.pk, actor=actor, reason=reason).created
    except CommandRetryRefused:
        return False


def device_link(obj: DeviceCommand) -> SafeString:
    url = reverse("admin:devices_device_change", args=[obj.target_device_id])
    return format_html('<a href="{}">{}</a>', url, obj.target_serial_number)


@admin.register(DeviceCommand)
class CommandIntentAdmin(ReadOnlyAdmin):
    org_path = "target_device__farm__organization_id"
    change_form_template = "admin/automation/devicecommand/change_form.html"
    change_list_template = "admin/automation/devicecommand/change_list.html"
    list_display = (
        "status",
        "status_reason",
        "age",
        "id",
        "device_command_id",
        "device",
        "endpoint",
        "command_method",
        "target_value",
        "attempt_count",
        "retry_of_id",
        "origin",
        "requested_by",
        "updated_at",
    )
    list_display_links = ("status", "id")
    list_filter = (
        "status",
        StuckFilter,
        "origin",
        ("target_device", admin.RelatedOnlyFieldListFilter),
    )
    list_select_related = ("target_device_endpoint__profile_endpoint", "requested_by")
    search_fields = ("device_command_id", "target_serial_number", "idempotency_key")
    readonly_fields = ("device", "timeline")
    actions = (
        reason_action(name="mark_failed", title="Mark failed", apply=_mark_failed),
        reason_action(name="retry", title="Retry as a new command (ended ones only)", apply=_retry),
    )

    @admin.display(description="age", ordering="created_at")
    def age(self, obj: DeviceCommand) -> str:
        return age_text((timezone.now() - obj.created_at).total_seconds())

    @admin.display(description="device", ordering="target_serial_number")
    def device(self, obj: DeviceCommand) -> SafeString:
        """Uncertain and stuck commands are judged on the device's page: one click away."""
        return device_link(obj)

    @admin.display(description="endpoint")
    def endpoint(self, obj: DeviceCommand) -> str:
        return obj.target_device_endpoint.profile_endpoint.key

    @admin.display(description="timeline (transitions and receipts)")
    def timeline(self, obj: DeviceCommand) -> SafeString:
        return timeline_html(command_timeline(intent=obj))

    def get_urls(self) -> list[Any]:
        """The diagnostics page, under the command list it starts from."""
        view = self.admin_site.admin_view(partial(diagnostics_view, self))
        return [path("diagnostics/", view, name="automation_diagnostics"), *super().get_urls()]

    def change_view(
        self, request: HttpRequest, object_id: str, form_url: str = "", extra_context: Any = None
    ) -> Any:
        """The buttons a command's state allows; each posts the list's action for this row."""
        obj = self.get_object(request, object_id)
        buttons: list[tuple[str, str]] = []
        if obj is not None and self.has_operate_permission(request, obj):
            if obj.status in COMMAND_TERMINAL:
                buttons.append(("retry", "Retry as a new command…"))
            else:
                buttons.append(("mark_failed", "Mark failed…"))
        context = {**(extra_context or {}), "command_buttons": buttons}
        return super().change_view(request, object_id, form_url, context)
