"""The rule page: endpoints picked by name (``SERIAL · key``, searched, org-scoped), values
entered as the endpoint's type (``rule_values``), further conditions, actions and schedules as
inlines (``rule_inlines``). Every check is the API's (``automation.services.rules``), shown on
its field or its row, and the rule is saved with its rows through the same service. Deleting
is the API's too (``rule_delete``): the rule stays listed, read-only, with who deleted it and
when, and its executions and commands are kept."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.db.models import Prefetch, QuerySet
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.utils.text import capfirst

from alarms.models import AlarmSeverity
from automation.admin.rule_inlines import (
    FORMSETS_ATTR,
    WEEKDAY_LABELS,
    ActionInline,
    ConditionInline,
    RuleInlineFormSet,
    ScheduleInline,
)
from automation.admin.rule_values import TypedValuesForm
from automation.models import AutomationRule, AutomationRuleSchedule, Operator
from automation.models.schedules import EVERY_DAY
from automation.operators import condition_text
from automation.services.rule_checks import SILENCE_MAX_S, WATCHDOG_PRIORITY
from automation.services.rules import (
    RULE_FIELDS,
    RuleInvalid,
    rule_create,
    rule_delete,
    rule_nested,
    rule_problems,
    rule_update,
)
from common.admin import OrgScopedAdmin
from common.tenancy import organization_scope
from devices.display import endpoint_value_text

# Left empty on the form, these keep the rule's value (a new rule's: the model default).
DEFAULTED = ("priority", "condition_window_s")


class RuleAdminForm(TypedValuesForm):
    """The same checks as the API: ``automation.services.rules``, over the rule and the rows
    of its inlines."""

    value_endpoints = {
        "threshold_value": "trigger_endpoint",
        "threshold_value_high": "trigger_endpoint",
        "target_value": "target_endpoint",
        "max_on_value": "target_endpoint",
    }
    limited = frozenset({"target_value", "max_on_value"})
    required_values = frozenset({"target_value"})

    class Meta:
        model = AutomationRule
        fields = RULE_FIELDS

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        for name in DEFAULTED:
            if name in self.fields:
                self.fields[name].required = False
        self._watchdog_fields()

    def _watchdog_fields(self) -> None:
        """A watchdog's threshold is whole seconds of silence, whatever the endpoint's type;
        the alarm severity is picked from the alarms' severities."""
        if "alarm_severity" in self.fields:
            self.fields["alarm_severity"] = forms.ChoiceField(
                choices=[("", "none"), *AlarmSeverity.choices],
                required=False,
                help_text="raise an alarm of this severity when the rule fires (a watchdog's: "
                "major when none)",
            )
        operator = (
            self.data.get(self.add_prefix("operator")) if self.is_bound else self.instance.operator
        )
        if operator == Operator.SILENT_FOR and "threshold_value" in self.fields:
            self.fields["threshold_value"] = forms.IntegerField(
                min_value=1,
                max_value=SILENCE_MAX_S,
                required=False,
                help_text="seconds without a reading of the trigger endpoint",
            )

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean() or {}
        new_watchdog = self.instance.pk is None and cleaned.get("operator") == Operator.SILENT_FOR
        if new_watchdog and cleaned.get("priority") is None:
            cleaned["priority"] = WATCHDOG_PRIORITY  # the top one, as the API gives it
        for name in DEFAULTED:
            if cleaned.get(name) is None:
                cleaned[name] = getattr(self.instance, name)
        formsets: dict[str, RuleInlineFormSet] = getattr(self.instance, FORMSETS_ATTR, {})
        if any(name in self.errors for name in ("farm", "trigger_endpoint", "target_endpoint")):
            return cleaned
        if not all(formset.is_valid() for formset in formsets.values()):
            return cleaned  # each row's own errors first
        fields = {name: cleaned.get(name) for name in RULE_FIELDS}
        nested = self._nested(formsets)
        errors = rule_problems(fields, rule_id=self.instance.pk, **nested)
        for name, message in errors.items():
            if isinstance(message, list) and name in formsets:
                self._row_errors(formsets[name], message)
            elif name in self.fields and name not in self.errors:
                self.add_error(name, message)
            elif name not in self.errors:
                self.add_error(None, f"{name}: {message}")
        return cleaned

    def _nested(self, formsets: dict[str, RuleInlineFormSet]) -> dict[str, list[Any]]:
        """Each list as the page shows it; one the post left out is the saved one."""
        saved: dict[str, list[Any]] = {}
        if self.instance.pk is not None:
            kinds = ("conditions", "actions", "schedules")
            saved = dict(zip(kinds, rule_nested(self.instance), strict=True))
        nested = {kind: saved.get(kind, []) for kind in ("conditions", "actions", "schedules")}
        for kind, formset in formsets.items():
            if formset.named:
                nested[kind] = formset.items()
        return nested

    @staticmethod
    def _row_errors(formset: RuleInlineFormSet, items: list[dict[str, str]]) -> None:
        for form, item in zip(formset.kept_forms(), items, strict=False):
            for name, message in item.items():
                form.add_error(name if name in form.fields else None, message)


def rule_when_text(rule: AutomationRule) -> str:
    """``DEMO-S01 · temp > 30 °C``, and how many further conditions; "—" for a rule only its
    schedules fire."""
    endpoint = rule.trigger_endpoint
    if endpoint is None:
        return "—"
    condition = condition_text(
        rule.operator, rule.threshold_value, rule.threshold_value_high, endpoint.profile_endpoint
    )
    more = len(rule.conditions.all())
    return f"{endpoint} {condition}" + (f" and {more} more" if more else "")


def rule_then_text(rule: AutomationRule) -> str:
    """``DEMO-R01 · io1 → true``, its run-time limit, and how many further actions."""
    endpoint = rule.target_endpoint
    value = endpoint_value_text(rule.target_value, endpoint.profile_endpoint)
    more = len(rule.actions.all())
    limit = f" for at most {rule.max_on_s} s" if rule.max_on_s else ""
    return f"{endpoint} → {value}{limit}" + (f" and {more} more" if more else "")


def schedule_summary(schedules: list[AutomationRuleSchedule]) -> str:
    """``07:00, 18:30 Mon Fri``: the active times, with their days unless every day."""
    parts = []
    for schedule in schedules:
        if not schedule.is_active:
            continue
        days = schedule.weekdays
        when = (
            ""
            if days == EVERY_DAY
            else " "
            + " ".join(label for bit, label in enumerate(WEEKDAY_LABELS) if days >> bit & 1)
        )
        parts.append(f"{schedule.local_time:%H:%M}{when}")
    return ", ".join(parts) or "—"


class DeletedFilter(admin.SimpleListFilter):
    title = "deleted"
    parameter_name = "deleted"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [("no", "No"), ("yes", "Yes")]

    def queryset(
        self, request: HttpRequest, queryset: QuerySet[AutomationRule]
    ) -> QuerySet[AutomationRule]:
        if self.value() in ("no", "yes"):
            return queryset.filter(deleted_at__isnull=self.value() == "no")
        return queryset


@admin.register(AutomationRule)
class AutomationRuleAdmin(OrgScopedAdmin):
    org_path = "farm__organization_id"
    form = RuleAdminForm
    inlines = (ConditionInline, ActionInline, ScheduleInline)
    # A rule reads as a sentence: when (trigger and condition), then (target and value); the
    # key columns fit a 1400 px screen with the menu and filters.
    list_display = (
        "id",
        "rule",
        "farm",
        "when",
        "then",
        "priority",
        "schedule",
        "active",
    )
    list_display_links = ("id", "rule")
    list_filter = ("is_active", DeletedFilter, "farm")
    list_select_related = (
        "farm",
        "trigger_endpoint__device",
        "trigger_endpoint__profile_endpoint",
        "target_endpoint__device",
        "target_endpoint__profile_endpoint",
    )
    search_fields = ("name",)
    autocomplete_fields = ("trigger_endpoint", "target_endpoint")

    def get_queryset(self, request: HttpRequest) -> QuerySet[AutomationRule]:
        schedules = AutomationRuleSchedule.objects.order_by("local_time")
        return (
            super()
            .get_queryset(request)
            .prefetch_related(Prefetch("schedules", schedules), "conditions", "actions")
        )

    @admin.display(description="schedule")
    def schedule(self, rule: AutomationRule) -> str:
        return schedule_summary(list(rule.schedules.all()))

    @admin.display(description="rule", ordering="name")
    def rule(self, rule: AutomationRule) -> str:
        return f"{rule.name} (deleted)" if rule.deleted_at else rule.name

    @admin.display(description="when")
    def when(self, rule: AutomationRule) -> str:
        return rule_when_text(rule)

    @admin.display(description="then")
    def then(self, rule: AutomationRule) -> str:
        return rule_then_text(rule)

    @admin.display(description="active", boolean=True, ordering="is_active")
    def active(self, rule: AutomationRule) -> bool:
        return rule.is_active

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> tuple[str, ...]:
        fields = tuple(super().get_readonly_fields(request, obj))
        return (*fields, "deleted_at", "deleted_by") if obj and obj.deleted_at else fields

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        """A deleted rule is history: shown, never changed again."""
        if obj is not None and obj.deleted_at is not None:
            return False
        return super().has_change_permission(request, obj)

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        if obj is not None and obj.deleted_at is not None:
            return False
        return super().has_delete_permission(request, obj)

    def get_deleted_objects(
        self, objs: Any, request: HttpRequest
    ) -> tuple[list[str], dict[str, int], set[str], list[str]]:
        """Only the rules: ``rule_delete`` keeps every row that points at them."""
        rules = [rule for rule in objs if rule.deleted_at is None]
        name = capfirst(str(self.opts.verbose_name))
        shown = [
            f"{name}: {rule} (deactivated; its executions and commands are kept)" for rule in rules
        ]
        return shown, {str(self.opts.verbose_name_plural): len(rules)}, set(), []

    def delete_model(self, request: HttpRequest, obj: AutomationRule) -> None:
        rule_delete(rule_id=obj.pk, actor=request.user.get_username())

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[AutomationRule]) -> None:
        for rule_id in queryset.filter(deleted_at__isnull=True).values_list("pk", flat=True):
            rule_delete(rule_id=rule_id, actor=request.user.get_username())

    def changeform_view(
        self,
        request: HttpRequest,
        object_id: str | None = None,
        form_url: str = "",
        extra_context: dict[str, Any] | None = None,
    ) -> HttpResponse:
        """The form ran the service's checks; one that fails only at the save (a concurrent
        edit closed a cycle meanwhile) rolls the save back and says why, not a server error."""
        try:
            return super().changeform_view(request, object_id, form_url, extra_context)
        except RuleInvalid as refused:
            why = "; ".join(f"{name}: {error}" for name, error in refused.errors.items())
            self.message_user(request, f"Not saved: {why}", level=messages.ERROR)
            return HttpResponseRedirect(request.get_full_path())

    def save_model(self, request: Any, obj: AutomationRule, form: Any, change: bool) -> None:
        """Saved with its rows in ``save_related``: one service call, one transaction."""

    def save_related(self, request: Any, form: Any, formsets: Any, change: bool) -> None:
        """Through the rule services, so a rule is checked and saved one way everywhere."""
        obj: AutomationRule = form.instance
        fields = {name: getattr(obj, name) for name in RULE_FIELDS}
        ours = [fs for fs in formsets if isinstance(fs, RuleInlineFormSet)]
        nested: dict[str, Any] = {fs.kind: fs.items() for fs in ours if fs.named}
        if change:
            rule_update(AutomationRule.objects.get(pk=obj.pk), **nested, **fields)
        else:
            created = rule_create(**nested, **fields)
            obj.pk, obj.created_at, obj.updated_at = (
                created.pk,
                created.created_at,
                created.updated_at,
            )
        for formset in ours:
            formset.record_saved()
            for row in [*formset.new_objects, *(o for o, _ in formset.changed_objects)]:
                self.refuse_out_of_scope(request, row)
        if organization_scope(request.user) is not None and not (
            self.get_queryset(request).filter(pk=obj.pk).exists()
        ):
            raise PermissionDenied("the row would leave your organisations")
