"""Alarms in the admin: the list, coloured by severity, filtered by status, severity, type and
farm; acknowledge and clear as actions that ask for a comment and call the services (an
alarm's fields are never edited). A farm's alarm policy is edited here too, and a device's
page shows its open alarms (the device admin as registered, extended here, so neither
``devices`` nor ``automation`` imports ``alarms``)."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.http import HttpRequest
from django.urls import reverse
from django.utils import timezone
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString, mark_safe

from alarms.models import Alarm, AlarmPolicy, AlarmTransition
from alarms.services import alarm_acknowledge, alarm_clear
from alarms.states import AlarmSource, AlarmStatus
from common.admin import OrgScopedAdmin, OrgScopedTabularInline, ReadOnlyAdmin, reason_action
from common.admin.columns import time_column
from devices.models import Device

# Severity colours of the list (text on a tinted background, readable in both admin themes).
SEVERITY_COLOURS: dict[str, str] = {
    "critical": "#b00020",
    "major": "#d9480f",
    "minor": "#b08900",
    "warning": "#1c7ed6",
}


class AlarmTransitionInline(OrgScopedTabularInline):
    model = AlarmTransition
    extra = 0
    can_delete = False
    ordering = ("at", "pk")
    readonly_fields = ("at", "from_status", "to_status", "reason", "actor", "comment")
    fields = readonly_fields

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


def _acknowledge(row: Any, actor: str, comment: str) -> bool:
    return alarm_acknowledge(alarm_id=row.pk, actor=actor, comment=comment, now=timezone.now())


def _clear(row: Any, actor: str, comment: str) -> bool:
    return alarm_clear(alarm_id=row.pk, actor=actor, comment=comment, now=timezone.now())


@admin.register(Alarm)
class AlarmAdmin(ReadOnlyAdmin):
    org_path = "organization_id"
    list_display = (
        "id",
        "severity_badge",
        "status",
        "type",
        "source_ref",
        "farm",
        "count",
        "first",
        "last",
        "acknowledged_by",
        "cleared_by",
    )
    list_filter = ("status", "severity", "type", "source", "farm")
    search_fields = ("detail", "acknowledged_by", "cleared_by")
    ordering = ("-id",)
    list_select_related = ("farm",)
    inlines = (AlarmTransitionInline,)
    actions = (
        reason_action(name="acknowledge", title="Acknowledge", apply=_acknowledge),
        reason_action(name="clear", title="Clear", apply=_clear),
    )
    readonly_fields = (
        "organization",
        "farm",
        "source",
        "source_id",
        "type",
        "severity",
        "status",
        "detail",
        "first_raised_at",
        "last_raised_at",
        "count",
        "acknowledged_by",
        "acknowledged_at",
        "acknowledge_comment",
        "cleared_by",
        "cleared_at",
        "clear_comment",
        "notify_count",
        "next_notify_at",
        "version",
    )

    first = time_column("first_raised_at", "first")
    last = time_column("last_raised_at", "last")

    @admin.display(description="severity", ordering="severity")
    def severity_badge(self, obj: Alarm) -> str:
        colour = SEVERITY_COLOURS.get(obj.severity, "#555")
        return format_html(
            '<span style="color:#fff;background:{};padding:1px 6px;border-radius:3px">{}</span>',
            colour,
            obj.severity,
        )

    @admin.display(description="source", ordering="source")
    def source_ref(self, obj: Alarm) -> str:
        return f"{obj.source}:{obj.source_id}"


@admin.register(AlarmPolicy)
class AlarmPolicyAdmin(OrgScopedAdmin):
    org_path = "farm__organization_id"
    list_display = ("id", "farm", "command_statuses", "repeat_every_s")
    list_select_related = ("farm",)


@admin.display(description="open alarms")
def device_open_alarms(model_admin: Any, obj: Device) -> SafeString | str:
    """The device's alarms not cleared, each linked to its page."""
    rows = (
        Alarm.objects.filter(source=AlarmSource.DEVICE, source_id=obj.pk)
        .exclude(status=AlarmStatus.CLEARED)
        .order_by("-pk")
    )
    if not rows:
        return "none"
    return format_html_join(
        mark_safe("<br>"),
        '<a href="{}">#{} {} {}</a> ({}, raised {} times)',
        (
            (
                reverse("admin:alarms_alarm_change", args=[a.pk]),
                a.pk,
                a.severity,
                a.type,
                a.status,
                a.count,
            )
            for a in rows
        ),
    )


def _device_admin_with_alarms() -> None:
    """Re-register the device admin as registered so far (the devices app's, or automation's
    over it) with the device's open alarms on its page."""
    base: type[Any] = type(admin.site.get_model_admin(Device))

    def get_readonly_fields(self: Any, request: HttpRequest, obj: Any = None) -> tuple[str, ...]:
        fields = tuple(base.get_readonly_fields(self, request, obj))
        return (*fields, "device_open_alarms") if obj is not None else fields

    extended = type(
        f"Alarms{base.__name__}",
        (base,),
        {
            "__module__": __name__,
            "device_open_alarms": device_open_alarms,
            "get_readonly_fields": get_readonly_fields,
        },
    )
    admin.site.unregister(Device)
    admin.site.register(Device, extended)


_device_admin_with_alarms()
