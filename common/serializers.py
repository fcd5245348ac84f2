"""Strict input types for every writable serializer of the API. DRF coerces by default
(``farm: 1.5`` becomes 1, ``name: 123`` becomes "123", ``true`` becomes 1); these fields take
a JSON value only of the type they name, bound numbers to what the database and the arithmetic
can hold, and bound JSON values (``common.validators``). Form input, which has no types, may
still give numbers and booleans as text.

``StrictModelSerializer`` maps every model field to its strict field, so a writable model
serializer gets them without naming each field; plain serializers use the fields directly.
"""

from __future__ import annotations

import math
import re
import uuid
from datetime import date, time
from typing import Any, TypeVar

from django.db import models
from django.http import QueryDict
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers
from rest_framework.fields import Field

from common.validators import (
    DATE_MAX,
    DATE_MIN,
    ID_MAX,
    LOCAL_TIME_MESSAGE,
    json_bounds_violation,
    validate_date_bounds,
)

_DIGITS = re.compile(r"-?[0-9]{1,19}")
_M = TypeVar("_M", bound=models.Model)


def _from_form(field: Field[Any, Any, Any, Any]) -> bool:
    """Whether the request's data came from a form (every value is text there)."""
    return isinstance(getattr(field.root, "initial_data", None), QueryDict)


class StrictCharField(serializers.CharField):
    """Text only: a number or a boolean is not silently turned into a string."""

    def to_internal_value(self, data: Any) -> str:
        if not isinstance(data, str):
            self.fail("invalid")
        return super().to_internal_value(data)


class StrictSlugField(serializers.SlugField):
    def to_internal_value(self, data: Any) -> str:
        if not isinstance(data, str):
            self.fail("invalid")
        return super().to_internal_value(data)


class StrictIntegerField(serializers.IntegerField):
    """An integer only (not 1.5, not 1.0, not true, not "1" in JSON), within ``min_value`` and
    ``max_value``, which default to what a 64-bit column holds."""

    default_error_messages = {"invalid": "A whole number is required."}

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("min_value", -ID_MAX)
        kwargs.setdefault("max_value", ID_MAX)
        super().__init__(**kwargs)

    def to_internal_value(self, data: Any) -> int:
        if isinstance(data, bool) or not isinstance(data, int | str):
            self.fail("invalid")
        if isinstance(data, str) and not (_from_form(self) and _DIGITS.fullmatch(data)):
            self.fail("invalid")
        return int(data)


class StrictFloatField(serializers.FloatField):
    """A finite JSON number (integers included); text only from a form."""

    def to_internal_value(self, data: Any) -> float:
        if isinstance(data, bool) or not isinstance(data, int | float | str):
            self.fail("invalid")
        if isinstance(data, str) and not _from_form(self):
            self.fail("invalid")
        value = super().to_internal_value(data)
        if not math.isfinite(value):
            self.fail("invalid")
        return value


class StrictBooleanField(serializers.BooleanField):
    """``true``/``false`` only; a form's text values ("true", "on", "1") still count."""

    def to_internal_value(self, data: Any) -> bool:
        if isinstance(data, bool):
            return data
        if isinstance(data, str) and _from_form(self):
            return bool(super().to_internal_value(data))
        self.fail("invalid", input=data)


class StrictUUIDField(serializers.UUIDField):
    """A UUID in text form (DRF would also take an integer as the UUID's 128 bits)."""

    def to_internal_value(self, data: Any) -> uuid.UUID:
        if not isinstance(data, str):
            self.fail("invalid", value=str(data)[:64])
        return super().to_internal_value(data)


class StrictPrimaryKeyRelatedField(serializers.PrimaryKeyRelatedField[Any]):
    """A row id: a positive integer (text only from a form). 1.5 is no id, and an id beyond
    what the column holds does not exist rather than overflowing the database driver."""

    def to_internal_value(self, data: Any) -> Any:
        if isinstance(data, bool) or not isinstance(data, int | str):
            self.fail("incorrect_type", data_type=type(data).__name__)
        if isinstance(data, str) and not (_from_form(self) and _DIGITS.fullmatch(data)):
            self.fail("incorrect_type", data_type="str")
        if not 0 < int(data) <= ID_MAX:
            self.fail("does_not_exist", pk_value=data)
        return super().to_internal_value(int(data))


class BoundedJSONField(serializers.JSONField):
    """Any JSON value within ``JSON_MAX_DEPTH`` and ``JSON_MAX_BYTES``, checked before DRF
    encodes it (an encoder recursing through 1,000 levels raises ``RecursionError``)."""

    def to_internal_value(self, data: Any) -> Any:
        violation = json_bounds_violation(data)
        if violation is not None:
            raise serializers.ValidationError(violation.message, code=violation.code)
        return super().to_internal_value(data)


# An endpoint's value on the wire: a number, a boolean or an enum's text, of the endpoint's
# data type (the gates check which). Typed so that a client and the docs show a number as one.
ENDPOINT_VALUE_SCHEMA: dict[str, Any] = {
    "oneOf": [{"type": "number"}, {"type": "boolean"}, {"type": "string"}],
    "description": "of the endpoint's data type: a number, a boolean, or an enum's value",
}


@extend_schema_field(ENDPOINT_VALUE_SCHEMA)
class EndpointValueField(BoundedJSONField):
    """A ``BoundedJSONField`` holding one endpoint value (a threshold, a target, a reading)."""


class BoundedDateField(serializers.DateField):
    """A date between ``DATE_MIN`` and ``DATE_MAX``."""

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("help_text", f"a date from {DATE_MIN} to {DATE_MAX}")
        super().__init__(**kwargs)
        self.validators.append(validate_date_bounds)

    def to_internal_value(self, value: Any) -> date:
        if not isinstance(value, str):
            self.fail("invalid", format="YYYY-MM-DD")
        return super().to_internal_value(value)


class LocalTimeField(serializers.TimeField):
    """A wall-clock time in the farm's zone: ``09:00+02:00`` is refused, not stripped of its
    offset (Django's parser drops it silently)."""

    def to_internal_value(self, value: Any) -> time:
        if not isinstance(value, str):
            self.fail("invalid", format="hh:mm[:ss]")
        if any(sign in value for sign in "+-") or value.strip().upper().endswith("Z"):
            raise serializers.ValidationError(f"This {LOCAL_TIME_MESSAGE}.", code="time_has_offset")
        return super().to_internal_value(value)


_INTEGER_FIELDS = (
    models.IntegerField,
    models.SmallIntegerField,
    models.BigIntegerField,
    models.PositiveIntegerField,
    models.PositiveSmallIntegerField,
    models.PositiveBigIntegerField,
)


class StrictModelSerializer(serializers.ModelSerializer[_M]):
    """A model serializer whose generated fields are the strict ones above (the model
    field's own validators and limits still apply on top)."""

    serializer_field_mapping = {
        **serializers.ModelSerializer.serializer_field_mapping,
        models.CharField: StrictCharField,
        models.TextField: StrictCharField,
        models.SlugField: StrictSlugField,
        **{field: StrictIntegerField for field in _INTEGER_FIELDS},
        models.FloatField: StrictFloatField,
        models.BooleanField: StrictBooleanField,
        models.UUIDField: StrictUUIDField,
        models.JSONField: BoundedJSONField,
        models.DateField: BoundedDateField,
        models.TimeField: LocalTimeField,
    }
    serializer_related_field = StrictPrimaryKeyRelatedField


class FixedFieldsMixin:
    """Fields an update may not change (``fixed_fields``: name -> why): naming one is a 400 on
    that field saying why, rather than being silently ignored."""

    fixed_fields: dict[str, str] = {}

    def validate(self, attrs: Any) -> Any:
        data = getattr(self, "initial_data", None)
        if isinstance(data, dict | QueryDict):
            errors = {name: [why] for name, why in self.fixed_fields.items() if name in data}
            if errors:
                raise serializers.ValidationError(errors)
        return super().validate(attrs)  # type: ignore[misc]
