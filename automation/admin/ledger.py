"""The execution core's ledger pages (endpoint events, rule executions, cool-downs): read-only
and scoped to the user's organisations; ``timeline_html`` renders a timeline as a table."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.db.models import QuerySet
from django.utils import timezone
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

from automation.diagnostics import Timeline, execution_timeline
from automation.models import (
    AutomationEndpointEvent,
    AutomationRuleExecution,
    CommandCooldown,
)
from common.admin import ReadOnlyAdmin


def timeline_html(timeline: Timeline) -> SafeString:
    rows = format_html_join(
        "",
        "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
        (
            (
                e.at.strftime("%Y-%m-%d %H:%M:%S.%f")[:-3],
                e.stage,
                "" if e.attempt is None else e.attempt,
                e.what,
                e.reason,
                e.detail,
            )
            for e in timeline.entries
        ),
    )
    return format_html(
        "<table><thead><tr><th>at (UTC)</th><th>stage</th><th>try</th><th>what</th>"
        "<th>reason</th><th>detail</th></tr></thead><tbody>{}</tbody></table>",
        rows,
    )


@admin.register(AutomationEndpointEvent)
class EndpointEventAdmin(ReadOnlyAdmin):
    org_path = "organization_id"
    list_display = (
        "id",
        "device_id",
        "device_instance_endpoint_id",
        "normalized_value",
        "event_timestamp",
        "processing_status",
        "status_reason",
    )
    list_filter = ("processing_status",)
    date_hierarchy = "created_at"


@admin.register(AutomationRuleExecution)
class RuleExecutionAdmin(ReadOnlyAdmin):
    org_path = "rule__farm__organization_id"
    list_display = (
        "id",
        "rule",
        "event_id",
        "outcome",
        "failure_reason",
        "suppressed_by_id",
        "created_at",
    )
    list_filter = ("outcome", "failure_reason")
    readonly_fields = ("timeline",)

    @admin.display(description="timeline")
    def timeline(self, obj: AutomationRuleExecution) -> SafeString:
        return timeline_html(execution_timeline(execution=obj))


class CoolingFilter(admin.SimpleListFilter):
    title = "cooling down"
    parameter_name = "cooling"

    def lookups(self, request: Any, model_admin: Any) -> list[tuple[str, str]]:
        return [("yes", "still cooling down"), ("no", "ended")]

    def queryset(self, request: Any, queryset: QuerySet[CommandCooldown]) -> Any:
        now = timezone.now()
        if self.value() == "yes":
            return queryset.filter(until__gt=now)
        if self.value() == "no":
            return queryset.filter(until__lte=now)
        return queryset


@admin.register(CommandCooldown)
class CommandCooldownAdmin(ReadOnlyAdmin):
    """Targets whose last command failed or stayed uncertain: rule decisions asking for the
    same value are suppressed until ``until`` (a support retry of the command lifts it)."""

    org_path = "target_device_endpoint__device__farm__organization_id"
    list_display = (
        "id",
        "target",
        "target_value",
        "failures",
        "until",
        "reason_code",
        "command_id",
        "updated_at",
    )
    list_filter = (CoolingFilter, "reason_code")
    list_select_related = (
        "target_device_endpoint__device",
        "target_device_endpoint__profile_endpoint",
    )
    search_fields = ("target_device_endpoint__device__serial_number",)

    @admin.display(description="target")
    def target(self, obj: CommandCooldown) -> str:
        endpoint = obj.target_device_endpoint
        return f"{endpoint.device.serial_number} {endpoint.profile_endpoint.key}"
