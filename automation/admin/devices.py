"""The device admin as the automation app completes it: how many commands are still open on
each device (one subquery for the whole list, linked to those commands) and, on a device's
page, the chart of its endpoints with the commands sent (1 h, 24 h, 7 d or 60 d: ``?chart=``,
by default the smallest that holds the data; past 96 h it reads the hourly rollups, so it
outlives the raw readings) and manual control (set a value,
cancel a hold: ``automation.admin.manual``). Registered here, over the devices app's admin, so
``devices`` never imports ``automation`` (docs/architecture.md)."""

from __future__ import annotations

from contextvars import ContextVar
from functools import partial
from typing import Any

from django.contrib import admin
from django.db.models import Count, IntegerField, OuterRef, QuerySet, Subquery, Value
from django.db.models.functions import Coalesce
from django.http import HttpRequest, HttpResponse
from django.urls import path, reverse
from django.utils import timezone
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

from automation.admin.chart import WINDOWS, chart_svg, chart_window_fitting, device_chart_data
from automation.admin.manual import hold_cancel_view, manual_command_view, manual_control_html
from automation.models import DeviceCommand
from automation.states import COMMAND_LIVE
from devices.admin import DeviceAdmin
from devices.models import Device

CHART_WINDOWS = WINDOWS
CHART_FITTING = ""  # no window asked for: the smallest that holds the data
# The change page's chosen window, for the read-only ``chart`` field that sees only the row.
_chart_window: ContextVar[str] = ContextVar("chart_window", default=CHART_FITTING)


def open_commands_count() -> Subquery:
    """The device's live commands (not ended), for ``annotate``."""
    rows = (
        DeviceCommand.objects.filter(target_device=OuterRef("pk"), status__in=sorted(COMMAND_LIVE))
        .order_by()
        .values("target_device")
        .annotate(n=Count("pk"))
        .values("n")
    )
    return Subquery(rows, output_field=IntegerField())


class AutomationDeviceAdmin(DeviceAdmin):
    list_display = (*DeviceAdmin.list_display, "open_count")

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
        url = reverse("admin:automation_devicecommand_changelist")
        query = f"target_device__id__exact={obj.pk}&status__in={','.join(sorted(COMMAND_LIVE))}"
        return format_html('<a href="{}?{}">{}</a>', url, query, count)

    @admin.display(description="open", ordering="open_command_count")
    def open_count(self, obj: Device) -> SafeString | int:
        """The list's column: its header short, so the list fits a 1400 px screen."""
        return self.open_commands(obj)

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

    def change_view(
        self,
        request: HttpRequest,
        object_id: str,
        form_url: str = "",
        extra_context: dict[str, Any] | None = None,
    ) -> HttpResponse:
        chosen = request.GET.get("chart", "")
        token = _chart_window.set(chosen if chosen in CHART_WINDOWS else CHART_FITTING)
        try:
            response = super().change_view(request, object_id, form_url, extra_context)
            if hasattr(response, "render"):  # the fields are read while rendering
                response.render()
            return response
        finally:
            _chart_window.reset(token)

    @admin.display(description="chart")
    def chart(self, obj: Device) -> SafeString:
        now = timezone.now()
        chosen = _chart_window.get() or chart_window_fitting(device=obj, now=now)
        window = CHART_WINDOWS[chosen]
        series, marks = device_chart_data(device=obj, now=now, window=window)
        choices = format_html_join(
            " · ",
            "{}",
            (
                (
                    format_html("<strong>{}</strong>", name)
                    if name == chosen
                    else format_html('<a href="?chart={}">{}</a>', name, name),
                )
                for name in CHART_WINDOWS
            ),
        )
        return format_html(
            '<p class="chart-windows">{}</p>{}',
            choices,
            chart_svg(series, marks, now=now, window=window),
        )


admin.site.unregister(Device)
admin.site.register(Device, AutomationDeviceAdmin)
