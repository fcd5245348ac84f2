"""The rule form: endpoints picked by name (``SERIAL · key``, searched, org-scoped) and values
entered as the endpoint's type (a number field, true/false, one of the allowed values) instead
of JSON text; every check is the API's (``automation.services.rules``), shown on its field."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin

from automation.models import AutomationRule
from automation.services.rules import RULE_FIELDS, rule_create, rule_errors, rule_update
from common.admin import OrgScopedAdmin
from devices.models import DeviceProfileEndpoint, EndpointDataType

# Value field -> the endpoint field whose data type it takes.
VALUE_ENDPOINTS = {
    "threshold_value": "trigger_endpoint",
    "threshold_value_high": "trigger_endpoint",
    "target_value": "target_endpoint",
}
BOOL_CHOICES = [("true", "true"), ("false", "false")]


class NumberField(forms.FloatField):
    """A finite number; a whole number stays an int (30, not 30.0, in the rule's JSON)."""

    def to_python(self, value: Any) -> Any:
        number = super().to_python(value)
        return int(number) if number is not None and number.is_integer() else number


class LiteralField(forms.CharField):
    """Before an endpoint is chosen: ``true``/``false``, a number, or else text. The rule
    checks then say whether it fits the endpoint."""

    def to_python(self, value: Any) -> Any:
        text = super().to_python(value)
        if text in ("", None):
            return None
        if text in ("true", "false"):
            return text == "true"
        try:
            number = float(text)
        except ValueError:
            return text
        return int(number) if number.is_integer() else number


def typed_value_field(
    endpoint: DeviceProfileEndpoint | None, *, required: bool, limits: bool
) -> forms.Field:
    """The input for a value of ``endpoint`` (``limits``: its min/max/allowed bind)."""
    help_text = "" if endpoint is None else f"a {endpoint.data_type} of {endpoint.key}"
    common: dict[str, Any] = {"required": required, "help_text": help_text}
    if endpoint is None:
        common["help_text"] = "true/false, a number or text: typed once the endpoint is saved"
        return LiteralField(**common)
    if endpoint.data_type == EndpointDataType.BOOL:
        choices = BOOL_CHOICES if required else [("", "—"), *BOOL_CHOICES]
        return forms.TypedChoiceField(
            choices=choices, coerce=lambda v: v == "true", empty_value=None, **common
        )
    if endpoint.data_type == EndpointDataType.NUMBER:
        if limits:
            return NumberField(min_value=endpoint.min_value, max_value=endpoint.max_value, **common)
        return NumberField(**common)
    allowed = endpoint.allowed_values if isinstance(endpoint.allowed_values, list) else None
    if allowed and limits:
        choices = [(v, v) for v in allowed if isinstance(v, str)]
        return forms.ChoiceField(choices=choices if required else [("", "—"), *choices], **common)
    return forms.CharField(max_length=200, **common)


def _as_initial(value: Any) -> Any:
    return ("true" if value else "false") if isinstance(value, bool) else value


class RuleAdminForm(forms.ModelForm):  # type: ignore[type-arg]
    """The same checks as the API: ``automation.services.rules``."""

    class Meta:
        model = AutomationRule
        fields = RULE_FIELDS

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if self.is_bound and any(
            self.data.get(self.add_prefix(name)) == "null" for name in VALUE_ENDPOINTS
        ):
            # JSON's spelling of "no value" (what the form took before) is an empty field.
            data = self.data.copy()  # type: ignore[attr-defined]  # a QueryDict when posted
            for name in VALUE_ENDPOINTS:
                if self.data.get(self.add_prefix(name)) == "null":
                    data[self.add_prefix(name)] = ""
            self.data = data
        for name, endpoint_field in VALUE_ENDPOINTS.items():
            if name not in self.fields:
                continue
            endpoint = self._chosen_endpoint(endpoint_field)
            self.fields[name] = typed_value_field(
                endpoint,
                required=name != "threshold_value_high",
                limits=name == "target_value",
            )
            if self.instance.pk is not None:
                self.initial[name] = _as_initial(getattr(self.instance, name))

    def _chosen_endpoint(self, field_name: str) -> DeviceProfileEndpoint | None:
        """The profile endpoint of the posted choice, else of the saved rule; only among the
        choices the user may pick (the field's scoped queryset)."""
        field = self.fields.get(field_name)
        if not isinstance(field, forms.ModelChoiceField) or field.queryset is None:
            return None
        pk = (
            self.data.get(self.add_prefix(field_name))
            if self.is_bound
            else getattr(self.instance, f"{field_name}_id", None)
        )
        if not pk or not str(pk).isdigit():
            return None
        chosen = field.queryset.select_related("profile_endpoint").filter(pk=pk).first()
        return None if chosen is None else chosen.profile_endpoint

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean() or {}
        needed = ("farm", "trigger_endpoint", "target_endpoint", "operator", "threshold_value")
        if all(cleaned.get(name) is not None for name in needed) and "target_value" in cleaned:
            for name, message in rule_errors(cleaned).items():
                if name in self.fields and name not in self.errors:
                    self.add_error(name, message)
                elif name not in self.fields:
                    self.add_error(None, message)
        return cleaned


@admin.register(AutomationRule)
class AutomationRuleAdmin(OrgScopedAdmin):
    org_path = "farm__organization_id"
    form = RuleAdminForm
    list_display = (
        "id",
        "name",
        "farm",
        "trigger_endpoint",
        "operator",
        "threshold_value",
        "target_endpoint",
        "target_value",
        "is_active",
    )
    list_filter = ("is_active", "farm")
    list_select_related = (
        "farm",
        "trigger_endpoint__device",
        "trigger_endpoint__profile_endpoint",
        "target_endpoint__device",
        "target_endpoint__profile_endpoint",
    )
    search_fields = ("name",)
    autocomplete_fields = ("trigger_endpoint", "target_endpoint")

    def save_model(self, request: Any, obj: AutomationRule, form: Any, change: bool) -> None:
        """Through the rule services, so a rule is checked and saved one way everywhere."""
        fields = {name: getattr(obj, name) for name in RULE_FIELDS}
        if change:
            rule_update(AutomationRule.objects.get(pk=obj.pk), **fields)
            return
        created = rule_create(**fields)
        obj.pk, obj.created_at, obj.updated_at = created.pk, created.created_at, created.updated_at
