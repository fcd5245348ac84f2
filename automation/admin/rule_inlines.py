"""The rule page's inlines: further conditions, further actions and schedules (weekdays as
checkboxes). Rows are not saved by the formsets: the rule form checks the rule with its rows
as a whole and the admin saves them together through ``automation.services.rules``; each
error of a row is shown on that row."""

from __future__ import annotations

from typing import Any, ClassVar

from django import forms
from django.forms.models import BaseInlineFormSet

from automation.admin.rule_values import TypedValuesForm
from automation.models import AutomationRuleAction, AutomationRuleCondition, AutomationRuleSchedule
from automation.models.schedules import EVERY_DAY
from common.admin import OrgScopedTabularInline

WEEKDAY_LABELS = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")  # bit 0 is Monday
# Where the admin leaves the rule's inline formsets for the rule form's whole-rule check: the
# formsets are built on the form's instance before the form is validated.
FORMSETS_ATTR = "_rule_inline_formsets"


def weekday_bits(days: Any) -> list[str]:
    """A bitmask as the checked boxes' values."""
    if isinstance(days, list | tuple):
        return [str(day) for day in days]
    return [str(bit) for bit in range(7) if int(days or 0) >> bit & 1]


class WeekdaysFormField(forms.MultipleChoiceField):
    """The days as checkboxes, a bit per day (Monday first) in the table."""

    widget = forms.CheckboxSelectMultiple

    def __init__(self, **kwargs: Any) -> None:
        choices = [(str(bit), label) for bit, label in enumerate(WEEKDAY_LABELS)]
        super().__init__(choices=choices, **kwargs)

    def prepare_value(self, value: Any) -> Any:
        return weekday_bits(value)

    def has_changed(self, initial: Any, data: Any) -> bool:
        return super().has_changed(weekday_bits(initial), data)

    def clean(self, value: Any) -> int:  # type: ignore[override]
        days = super().clean(value)
        return sum(1 << int(day) for day in days)


class RuleInlineFormSet(BaseInlineFormSet):  # type: ignore[type-arg]
    """Registers itself on the rule being edited (for the rule form's whole-rule check). A
    post without this formset's management form (a script posting only the rule's fields)
    leaves the rule's rows as they are, as the API does for a list it does not name."""

    kind: ClassVar[str] = ""  # the rule service's keyword for these rows

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.named = not self.is_bound or f"{self.prefix}-TOTAL_FORMS" in self.data
        if not self.named:
            data = self.data.copy()  # type: ignore[attr-defined]  # a QueryDict when posted
            data[f"{self.prefix}-TOTAL_FORMS"] = data[f"{self.prefix}-INITIAL_FORMS"] = "0"
            self.data = data
        registry = getattr(self.instance, FORMSETS_ATTR, None)
        if registry is None:
            registry = {}
            setattr(self.instance, FORMSETS_ATTR, registry)
        registry[self.kind] = self

    def _deleted(self, form: forms.BaseForm) -> bool:
        return bool(self.can_delete and getattr(form, "cleaned_data", {}).get("DELETE"))

    def kept_forms(self) -> list[forms.ModelForm]:  # type: ignore[type-arg]
        """The rows the rule keeps: filled in and not marked for deletion."""
        kept = []
        for form in self.forms:
            if not form.has_changed() and form.instance.pk is None:
                continue
            if self._deleted(form):
                continue
            kept.append(form)
        return kept

    def items(self) -> list[dict[str, Any]]:
        """The kept rows as the rule service takes them (``kind``)."""
        fields = [name for name in self.form.base_fields if name not in ("id", "rule", "DELETE")]
        return [
            {name: form.cleaned_data.get(name) for name in fields} for form in self.kept_forms()
        ]

    def record_saved(self) -> None:
        """What ``formset.save()`` would have recorded, for the admin's change message."""
        self.new_objects: list[Any] = []
        self.changed_objects: list[tuple[Any, list[str]]] = []
        self.deleted_objects: list[Any] = []
        if not self.named:
            return
        for form in self.initial_forms:
            if self._deleted(form):
                self.deleted_objects.append(form.instance)
            elif form.has_changed():
                self.changed_objects.append((form.instance, form.changed_data))
        self.new_objects = [f.instance for f in self.extra_forms if f in self.kept_forms()]


class ConditionsFormSet(RuleInlineFormSet):
    kind = "conditions"


class ActionsFormSet(RuleInlineFormSet):
    kind = "actions"


class SchedulesFormSet(RuleInlineFormSet):
    kind = "schedules"


class ConditionForm(TypedValuesForm):
    value_endpoints = {"threshold_value": "endpoint", "threshold_value_high": "endpoint"}
    required_values = frozenset({"threshold_value"})

    class Meta:
        model = AutomationRuleCondition
        fields = ("endpoint", "operator", "threshold_value", "threshold_value_high")


class ActionForm(TypedValuesForm):
    value_endpoints = {"target_value": "target_endpoint", "max_on_value": "target_endpoint"}
    limited = frozenset({"target_value", "max_on_value"})
    required_values = frozenset({"target_value"})

    class Meta:
        model = AutomationRuleAction
        fields = ("target_endpoint", "target_value", "max_on_s", "max_on_value")


class ScheduleForm(forms.ModelForm):  # type: ignore[type-arg]
    weekdays = WeekdaysFormField(initial=weekday_bits(EVERY_DAY))

    class Meta:
        model = AutomationRuleSchedule
        fields = ("local_time", "weekdays", "max_lateness_s", "is_active")
        widgets = {"local_time": forms.TimeInput(format="%H:%M")}


class ConditionInline(OrgScopedTabularInline):
    model = AutomationRuleCondition
    form = ConditionForm
    formset = ConditionsFormSet
    extra = 0
    autocomplete_fields = ("endpoint",)
    verbose_name = "condition"
    verbose_name_plural = "further conditions (each must hold within the condition window)"


class ActionInline(OrgScopedTabularInline):
    model = AutomationRuleAction
    form = ActionForm
    formset = ActionsFormSet
    extra = 0
    autocomplete_fields = ("target_endpoint",)
    verbose_name = "action"
    verbose_name_plural = "further actions"


class ScheduleInline(OrgScopedTabularInline):
    model = AutomationRuleSchedule
    form = ScheduleForm
    formset = SchedulesFormSet
    extra = 0
    verbose_name = "schedule"
    verbose_name_plural = "schedules (local times in the farm's zone)"
