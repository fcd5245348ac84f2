"""Support's command list: what is wrong first (status, reason, age), a filter for commands
stuck live, and on a command's page its state, target, value and origin first, then its
timeline, the ledger's internals (keys, lease, version) folded, and the retry / mark-failed
buttons. The buttons post the list's own actions, so a move asks for a reason and goes through
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
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

from automation.admin.diagnostics import diagnostics_view
from automation.admin.ledger import timeline_html
from automation.diagnostics import command_timeline, requester_name
from automation.models import DeviceCommand
from automation.services.support import (
    CommandRetryRefused,
    command_mark_failed,
    command_retry,
)
from automation.states import COMMAND_LIVE, COMMAND_TERMINAL, CommandOrigin
from common.admin import ReadOnlyAdmin, reason_action
from devices.display import endpoint_value_text

STUCK_AFTER_MIN = (5, 15, 60)
COMMAND_ADMIN = "automation_devicecommand"
RULE_ADMIN = "automation_automationrule"
EXECUTION_ADMIN = "automation_automationruleexecution"


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
    return command_mark_failed(command_id=row.pk, actor=actor, reason=reason)


def _retry(row: Any, actor: str, reason: str) -> bool:
    """Counted as done only when a new attempt was created; a live command is skipped."""
    try:
        return command_retry(command_id=row.pk, actor=actor, reason=reason).created
    except CommandRetryRefused:
        return False


def device_link(obj: DeviceCommand) -> SafeString:
    url = reverse("admin:devices_device_change", args=[obj.target_device_id])
    return format_html('<a href="{}">{}</a>', url, obj.target_serial_number)


def _change_link(name: str, pk: int, text: str) -> SafeString:
    return format_html('<a href="{}">{}</a>', reverse(f"admin:{name}_change", args=[pk]), text)


def origin_html(obj: DeviceCommand) -> SafeString:
    """Who decided the command, one click from the rule, the execution or the command it
    retries: ``rule «Vent on» (execution #8)``, ``manual by olga for “relay stuck”``."""
    parts: list[SafeString] = []
    if obj.origin != CommandOrigin.RULE:
        parts.append(format_html("{}", obj.get_origin_display().lower()))
    if obj.rule_id is not None:
        rule = _change_link(
            RULE_ADMIN, obj.rule_id, obj.rule.name if obj.rule else str(obj.rule_id)
        )
        parts.append(format_html("of rule «{}»" if parts else "rule «{}»", rule))
    if obj.rule_execution_id is not None:
        execution = f"execution #{obj.rule_execution_id}"
        link = _change_link(EXECUTION_ADMIN, obj.rule_execution_id, execution)
        parts.append(format_html("({})", link))
    if obj.origin in (CommandOrigin.MANUAL, CommandOrigin.ROLLOUT) and obj.requested_by_id:
        parts.append(format_html("by {}", requester_name(obj)))
    if obj.request_reason:
        parts.append(format_html("for “{}”", obj.request_reason))
    if obj.retry_of_id is not None:
        retried = _change_link(COMMAND_ADMIN, obj.retry_of_id, f"#{obj.retry_of_id}")
        parts.append(format_html("— a retry of command {}", retried))
    return format_html_join(" ", "{}", ((part,) for part in parts))


@admin.register(DeviceCommand)
class CommandAdmin(ReadOnlyAdmin):
    org_path = "target_device__farm__organization_id"
    change_form_template = "admin/automation/devicecommand/change_form.html"
    change_list_template = "admin/automation/devicecommand/change_list.html"
    # What is wrong first; the key columns fit a 1400 px screen with the menu and filters.
    list_display = (
        "status",
        "status_reason",
        "age",
        "id",
        "device",
        "endpoint",
        "value",
        "origin",
        "tries",
    )
    list_display_links = ("status", "id")
    list_filter = (
        "status",
        StuckFilter,
        "origin",
        ("target_device", admin.RelatedOnlyFieldListFilter),
    )
    list_select_related = ("target_device_endpoint__profile_endpoint",)
    search_fields = ("device_command_id", "target_serial_number", "idempotency_key")
    # What happened first, then the timeline; the ledger's internals folded.
    fieldsets = (
        (
            None,
            {
                "fields": (
                    "state",
                    "target",
                    "value",
                    "run_limit",
                    "origin_shown",
                    "attempts",
                    "retried_as",
                    "last_error",
                )
            },
        ),
        ("Timeline", {"fields": ("timeline",), "classes": ("wide", "command-timeline")}),
        (
            "When",
            {
                "fields": (
                    ("created_at", "dispatched_at", "first_dispatched_at"),
                    ("acknowledged_at", "applied_at", "finished_at"),
                    ("next_attempt_at", "deadline_at"),
                    ("prior", "prior_value_at"),
                )
            },
        ),
        (
            "Internals: the ledger's keys, lease and version",
            {
                "classes": ("collapse",),
                "fields": (
                    ("command_method", "command_params"),
                    ("device_command_id", "mqtt_request_id"),
                    "idempotency_key",
                    "desired_state_fingerprint",
                    ("lease_expires_at", "inflight_endpoint"),
                    ("version", "updated_at"),
                    ("target_device", "target_device_endpoint", "target_serial_number"),
                    ("rule", "rule_execution", "retry_of", "requested_by"),
                ),
            },
        ),
    )
    readonly_fields = (
        "state",
        "target",
        "value",
        "run_limit",
        "origin_shown",
        "attempts",
        "retried_as",
        "timeline",
        "prior",
    )
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

    @admin.display(description="value")
    def value(self, obj: DeviceCommand) -> str:
        return endpoint_value_text(obj.target_value, obj.target_device_endpoint.profile_endpoint)

    @admin.display(description="run-time limit")
    def run_limit(self, obj: DeviceCommand) -> str:
        """What follows once it applied (``automation.services.run_limits``)."""
        if not obj.max_on_s:
            return "none"
        endpoint = obj.target_device_endpoint.profile_endpoint
        back = (
            "the endpoint's safe value"
            if obj.max_on_value is None
            else endpoint_value_text(obj.max_on_value, endpoint)
        )
        return f"back to {back} {obj.max_on_s} s after it applied"

    @admin.display(description="value before")
    def prior(self, obj: DeviceCommand) -> str:
        """What the endpoint reported at the first dispatch: applied means a change from it."""
        return endpoint_value_text(obj.prior_value, obj.target_device_endpoint.profile_endpoint)

    @admin.display(description="tries", ordering="attempt_count")
    def tries(self, obj: DeviceCommand) -> int:
        return obj.attempt_count

    @admin.display(description="state")
    def state(self, obj: DeviceCommand) -> SafeString:
        reason = f" ({obj.status_reason})" if obj.status_reason else ""
        return format_html(
            '<span id="command-state" class="command-state status-{}">{}</span>{}',
            obj.status,
            obj.get_status_display(),
            reason,
        )

    @admin.display(description="target")
    def target(self, obj: DeviceCommand) -> SafeString:
        key = obj.target_device_endpoint.profile_endpoint.key
        return format_html("{} · {}", device_link(obj), key)

    @admin.display(description="origin")
    def origin_shown(self, obj: DeviceCommand) -> SafeString:
        return origin_html(obj)

    @admin.display(description="attempts")
    def attempts(self, obj: DeviceCommand) -> str:
        return f"{obj.attempt_count} of at most {obj.max_attempts}"

    @admin.display(description="retried as")
    def retried_as(self, obj: DeviceCommand) -> SafeString | str:
        """Support's retries of it: an ended command never moves again, so its page leads to
        them; who asked and why is each retry's first audit row."""
        retries = list(obj.retries.order_by("pk").values_list("pk", flat=True))
        if not retries:
            return "—"
        links = ((_change_link(COMMAND_ADMIN, pk, f"#{pk}"),) for pk in retries)
        return format_html_join(", ", "{}", links)

    @admin.display(description="transitions and receipts, oldest first")
    def timeline(self, obj: DeviceCommand) -> SafeString:
        return timeline_html(command_timeline(command=obj), element_id="command-timeline")

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
