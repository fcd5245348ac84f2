"""The execution core's ledger pages (endpoint events, rule executions, cool-downs): read-only
and scoped to the user's organisations; ``timeline_html`` renders a timeline as a table."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.db.models import QuerySet
from django.urls import reverse
from django.utils import timezone
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

from automation.diagnostics import Timeline, execution_timeline
from automation.diagnostics.timelines import outcome_text
from automation.models import (
    AutomationEndpointEvent,
    AutomationRuleExecution,
    CommandCooldown,
)
from automation.states import ExecutionOutcome
from common.admin import ReadOnlyAdmin
from common.admin.columns import time_column
from devices.display import endpoint_value_text


def timeline_html(timeline: Timeline, *, element_id: str = "") -> SafeString:
    """The timeline as a table (``table.timeline``, one ``tr`` per entry, its stage its class)."""
    rows = format_html_join(
        "",
        '<tr class="stage-{}"><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td>'
        "<td>{}</td></tr>",
        (
            (
                e.stage,
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
        '<table class="timeline"{}><thead><tr><th>at (UTC)</th><th>stage</th><th>try</th>'
        "<th>what</th><th>reason</th><th>detail</th></tr></thead><tbody>{}</tbody></table>",
        format_html(' id="{}"', element_id) if element_id else "",
        rows,
    )


@admin.register(AutomationEndpointEvent)
class EndpointEventAdmin(ReadOnlyAdmin):
    org_path = "device_instance_endpoint__device__farm__organization_id"
    list_display = (
        "id",
        "endpoint",
        "value",
        "event_timestamp",
        "processing_status",
        "status_reason",
    )
    list_filter = ("processing_status",)
    list_select_related = (
        "device_instance_endpoint__device",
        "device_instance_endpoint__profile_endpoint",
    )
    date_hierarchy = "created_at"

    @admin.display(description="endpoint")
    def endpoint(self, obj: AutomationEndpointEvent) -> str:
        return str(obj.device_instance_endpoint)

    @admin.display(description="value")
    def value(self, obj: AutomationEndpointEvent) -> str:
        endpoint = obj.device_instance_endpoint.profile_endpoint
        return endpoint_value_text(obj.normalized_value, endpoint)


class OutcomeFilter(admin.SimpleListFilter):
    """The outcomes in the pages' words (``command created``, not a stored value)."""

    title = "outcome"
    parameter_name = "outcome__exact"  # the address the plain field filter had

    def lookups(self, request: Any, model_admin: Any) -> list[tuple[str, str]]:
        return [(str(outcome), outcome_text(outcome)) for outcome in ExecutionOutcome]

    def queryset(self, request: Any, queryset: QuerySet[AutomationRuleExecution]) -> Any:
        value = self.value()
        return queryset.filter(outcome=value) if value else queryset


@admin.register(AutomationRuleExecution)
class RuleExecutionAdmin(ReadOnlyAdmin):
    org_path = "rule__farm__organization_id"
    list_display = ("id", "rule", "event_ref", "decided", "reason", "held_by", "at")
    list_filter = (OutcomeFilter, "failure_reason")
    list_select_related = ("rule",)
    readonly_fields = ("timeline",)

    @admin.display(description="outcome", ordering="outcome")
    def decided(self, obj: AutomationRuleExecution) -> str:
        return outcome_text(obj.outcome)

    @admin.display(description="event", ordering="event_id")
    def event_ref(self, obj: AutomationRuleExecution) -> int | None:
        return obj.event_id

    @admin.display(description="reason", ordering="failure_reason")
    def reason(self, obj: AutomationRuleExecution) -> str:
        return obj.failure_reason

    @admin.display(description="held by")
    def held_by(self, obj: AutomationRuleExecution) -> str:
        """The command whose cool-down, or the decision whose priority, held this one."""
        if obj.suppressed_by_id is not None:
            return f"command #{obj.suppressed_by_id}"
        return f"execution #{obj.won_by_id}" if obj.won_by_id is not None else ""

    at = time_column("created_at", "at")

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
    list_display = ("id", "target", "value", "fails", "until_short", "reason", "command_link")
    list_filter = (CoolingFilter, "reason_code")
    list_select_related = (
        "target_device_endpoint__device",
        "target_device_endpoint__profile_endpoint",
    )
    search_fields = ("target_device_endpoint__device__serial_number",)

    until_short = time_column("until", "until")

    @admin.display(description="target")
    def target(self, obj: CommandCooldown) -> SafeString:
        return format_html(
            '<span style="white-space: nowrap">{}</span>', obj.target_device_endpoint
        )

    @admin.display(description="fails", ordering="failures")
    def fails(self, obj: CommandCooldown) -> int:
        return obj.failures

    @admin.display(description="reason", ordering="reason_code")
    def reason(self, obj: CommandCooldown) -> str:
        return obj.reason_code

    @admin.display(description="command")
    def command_link(self, obj: CommandCooldown) -> SafeString:
        url = reverse("admin:automation_devicecommand_change", args=[obj.command_id])
        return format_html('<a href="{}">#{}</a>', url, obj.command_id)

    @admin.display(description="value")
    def value(self, obj: CommandCooldown) -> str:
        return endpoint_value_text(obj.target_value, obj.target_device_endpoint.profile_endpoint)
