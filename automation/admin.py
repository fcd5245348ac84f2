"""Support's admin for the execution core and the due-work scheduler: ledger rows are read-only
and scoped to the user's organisations; manual moves are actions that ask for a reason and
call ``automation.services.support`` (a guarded update with an audit row)."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin
from django.db.models import QuerySet
from django.utils import timezone
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

from automation.diagnostics import Timeline, command_timeline, execution_timeline
from automation.models import (
    AutomationCommandIntent,
    AutomationEndpointEvent,
    AutomationRule,
    AutomationRuleExecution,
    CommandCooldown,
)
from automation.services.rules import RULE_FIELDS, rule_create, rule_errors, rule_update
from automation.services.support import (
    CommandRetryRefused,
    command_intent_mark_failed,
    command_intent_retry,
)
from common.admin import OrgScopedAdmin, ReadOnlyAdmin, reason_action


def _timeline_html(timeline: Timeline) -> SafeString:
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


class RuleAdminForm(forms.ModelForm):  # type: ignore[type-arg]
    """The same checks as the API: ``automation.services.rules``."""

    class Meta:
        model = AutomationRule
        fields = RULE_FIELDS

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean() or {}
        needed = ("farm", "trigger_endpoint", "target_endpoint", "operator", "threshold_value")
        if all(cleaned.get(name) is not None for name in needed) and "target_value" in cleaned:
            for name, message in rule_errors(cleaned).items():
                self.add_error(name if name in self.fields else None, message)
        return cleaned


@admin.register(AutomationRule)
class AutomationRuleAdmin(OrgScopedAdmin):
    org_path = "farm__organization_id"
    form = RuleAdminForm
    list_display = (
        "id",
        "name",
        "farm",
        "operator",
        "threshold_value",
        "target_value",
        "is_active",
    )
    list_filter = ("is_active", "farm")
    search_fields = ("name",)
    raw_id_fields = ("trigger_endpoint", "target_endpoint")

    def save_model(self, request: Any, obj: AutomationRule, form: Any, change: bool) -> None:
        """Through the rule services, so a rule is checked and saved one way everywhere."""
        fields = {name: getattr(obj, name) for name in RULE_FIELDS}
        if change:
            rule_update(AutomationRule.objects.get(pk=obj.pk), **fields)
            return
        created = rule_create(**fields)
        obj.pk, obj.created_at, obj.updated_at = created.pk, created.created_at, created.updated_at


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
        return _timeline_html(execution_timeline(execution=obj))


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


def _mark_failed(row: Any, actor: str, reason: str) -> bool:
    return command_intent_mark_failed(intent_id=row.pk, actor=actor, reason=reason)


def _retry(row: Any, actor: str, reason: str) -> bool:
    """Counted as done only when a new attempt was created; a live command is skipped."""
    try:
        return command_intent_retry(intent_id=row.pk, actor=actor, reason=reason).created
    except CommandRetryRefused:
        return False


@admin.register(AutomationCommandIntent)
class CommandIntentAdmin(ReadOnlyAdmin):
    org_path = "target_device__farm__organization_id"
    list_display = (
        "id",
        "device_command_id",
        "target_serial_number",
        "command_method",
        "target_value",
        "status",
        "status_reason",
        "attempt_count",
        "retry_of_id",
        "updated_at",
    )
    list_filter = ("status", ("target_device", admin.RelatedOnlyFieldListFilter))
    search_fields = ("device_command_id", "target_serial_number", "idempotency_key")
    readonly_fields = ("timeline",)
    actions = (
        reason_action(name="mark_failed", title="Mark failed", apply=_mark_failed),
        reason_action(name="retry", title="Retry as a new command (ended ones only)", apply=_retry),
    )

    @admin.display(description="timeline (transitions and receipts)")
    def timeline(self, obj: AutomationCommandIntent) -> SafeString:
        return _timeline_html(command_timeline(intent=obj))
