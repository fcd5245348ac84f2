"""Values in the rule forms (the rule's and its inline rows') entered as their endpoint's type
(a number field, true/false, one of the allowed values) instead of JSON text, once the
endpoint is chosen; before that, a literal whose fit the rule checks then judge."""

from __future__ import annotations

from typing import Any, ClassVar, cast

from django import forms

from automation.operators import OPERATOR_CHOICES
from devices.models import DeviceProfileEndpoint, EndpointDataType

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
    unit = f", in {endpoint.unit}" if endpoint is not None and endpoint.unit else ""
    help_text = "" if endpoint is None else f"a {endpoint.data_type} of {endpoint.key}{unit}"
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
        if required:
            return forms.ChoiceField(choices=choices, **common)
        # Left empty, an optional value is none (a run-time limit's: the safe value).
        return forms.TypedChoiceField(choices=[("", "—"), *choices], empty_value=None, **common)
    return forms.CharField(max_length=200, empty_value=None if not required else "", **common)


def _as_initial(value: Any) -> Any:
    return ("true" if value else "false") if isinstance(value, bool) else value


class TypedValuesForm(forms.ModelForm):  # type: ignore[type-arg]
    """A model form whose JSON value fields take the type of the endpoint they belong to:
    ``value_endpoints`` maps value field -> endpoint field; ``limited`` names the values an
    endpoint's min/max/allowed bind (what is written to it); ``required_values`` the ones
    that may not be empty."""

    value_endpoints: ClassVar[dict[str, str]] = {}
    limited: ClassVar[frozenset[str]] = frozenset()
    required_values: ClassVar[frozenset[str]] = frozenset()

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        names = [self.add_prefix(name) for name in self.value_endpoints]
        if self.is_bound and any(self.data.get(name) == "null" for name in names):
            # JSON's spelling of "no value" (what the form took before) is an empty field.
            data = self.data.copy()  # type: ignore[attr-defined]  # a QueryDict when posted
            for name in names:
                if self.data.get(name) == "null":
                    data[name] = ""
            self.data = data
        for name, endpoint_field in self.value_endpoints.items():
            if name not in self.fields:
                continue
            self.fields[name] = typed_value_field(
                self._chosen_endpoint(endpoint_field),
                required=name in self.required_values,
                limits=name in self.limited,
            )
            if self.instance.pk is not None:
                self.initial[name] = _as_initial(getattr(self.instance, name))
        operator = self.fields.get("operator")
        if isinstance(operator, forms.ChoiceField):  # "> (greater than)", not "Gt"
            labels = dict(OPERATOR_CHOICES)
            choices = cast(list[tuple[str, str]], operator.choices)
            operator.choices = [(v, labels.get(v, label)) for v, label in choices]

    def _chosen_endpoint(self, field_name: str) -> DeviceProfileEndpoint | None:
        """The profile endpoint of the posted choice, else of the saved row; only among the
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
