"""The device admin as the automation app completes it: how many commands are still open on
each device (one subquery for the whole list, linked to those commands) and, on a device's
page, the 24 h chart of its endpoints with the commands sent and manual control (set a value,
cancel a hold: ``automation.admin.manual``). Registered here, over the devices app's admin, so
``devices`` never imports ``automation`` (docs/architecture.md)."""

from __future__ import annotations

from functools import partial
from typing import Any

from django.contrib import admin
from django.db.models import Count, IntegerField, OuterRef, QuerySet, Subquery, Value
from django.db.models.functions import Coalesce
from django.http import HttpRequest
from django.urls import path, reverse
from django.utils import timezone
from django.utils.html import format_html
from django.utils.safestring import SafeString

from automation.admin.chart import chart_svg, device_chart_data
from automation.admin.manual import hold_cancel_view, manual_command_view, manual_control_html
from automation.models import AutomationCommandIntent
from automation.states import COMMAND_LIVE
from devices.admin import DeviceAdmin
from devices.models import Device


def open_commands_count() -> Subquery:
    """The device's live commands (not ended), for ``annotate``."""
    rows = (
        AutomationCommandIntent.objects.filter(
            target_device=OuterRef("pk"), status__in=sorted(COMMAND_LIVE)
        )
        .order_by()
        .values("target_device")
        .annotate(n=Count("pk"))
        .values("n")
    )
    return Subquery(rows, output_field=IntegerField())


class AutomationDeviceAdmin(DeviceAdmin):
    list_display = (*DeviceAdmin.list_display, "open_commands")

    def get_queryset(self, request: HttpRequest) -> QuerySet[Any]:
        return (
            super()
            .get_queryset(request)
            .annotate(open_command_count=Coalesce(open_commands_count(), Value(0)))
        )

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> tuple[str, ...]:
        fields = (*super().get_readonly_fields(request, obj), "open_commands", "chart")
        return (*fields, "manual_control") if obj is not None else fields

    @admin.display(description="open commands", ordering="open_command_count")
    def open_commands(self, obj: Device) -> SafeString | int:
        count: int = getattr(obj, "open_command_count", 0)
        if not count:
            return 0
        url = reverse("admin:automation_automationcommandintent_changelist")
        query = f"target_device__id__exact={obj.pk}&status__in={','.join(sorted(COMMAND_LIVE))}"
        return format_html('<a href="{}?{}">{}</a>', url, query, count)

    @admin.display(description="manual control")
    def manual_control(self, obj: Device) -> SafeString:
        return manual_control_html(obj)

    def get_urls(self) -> list[Any]:
        def view(handler: Any, name: str) -> Any:
            wrapped = self.admin_site.admin_view(partial(handler, self))
            return path(
                f"<path:object_id>/{name}/",
                wrapped,
                name=f"devices_device_{name.replace('-', '_')}",
            )

        return [
            view(manual_command_view, "manual-command"),
            view(hold_cancel_view, "hold-cancel"),
            *super().get_urls(),
        ]

    @admin.display(description="last 24 h")
    def chart(self, obj: Device) -> SafeString:
        now = timezone.now()
        series, marks = device_chart_data(device=obj, now=now)
        return chart_svg(series, marks, now=now)


admin.site.unregister(Device)
admin.site.register(Device, AutomationDeviceAdmin)
