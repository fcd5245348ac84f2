"""Strict query-parameter filters for the API's FilterSets (django-filter, the default filter
backend). A value that is not what the parameter takes is a 400 naming the parameter, in the
API's error shape, instead of an empty list or a silently ignored filter; an empty value
means no filter. drf-spectacular documents each parameter from the FilterSet."""

from __future__ import annotations

from typing import Any

import django_filters
from django import forms
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema_field

from common.validators import ID_MAX

_TRUE = frozenset({"1", "true", "yes"})
_FALSE = frozenset({"0", "false", "no"})


class IdFormField(forms.CharField):
    """A row id in ASCII digits (``"²".isdigit()`` is true in Python) that fits a 64-bit
    column, so a huge one is refused before it overflows the database driver."""

    def to_python(self, value: Any) -> int | None:  # type: ignore[override]
        text = super().to_python(value)
        if text is None or text in self.empty_values:
            return None
        if not (text.isascii() and text.isdigit()) or len(text) > 19 or int(text) > ID_MAX:
            raise forms.ValidationError("must be an integer id", code="invalid")
        return int(text)


class StrictBooleanFormField(forms.CharField):
    """``1``/``true``/``yes`` or ``0``/``false``/``no`` (any case); anything else is refused
    (django-filter's own boolean ignores what it does not know)."""

    def to_python(self, value: Any) -> bool | None:  # type: ignore[override]
        text = super().to_python(value)
        if text is None or text in self.empty_values:
            return None
        if text.lower() in _TRUE:
            return True
        if text.lower() in _FALSE:
            return False
        raise forms.ValidationError("must be true or false (1 or 0)", code="invalid")


@extend_schema_field(OpenApiTypes.INT)
class IdFilter(django_filters.Filter):
    field_class = IdFormField


@extend_schema_field(OpenApiTypes.BOOL)
class StrictBooleanFilter(django_filters.Filter):
    field_class = StrictBooleanFormField
