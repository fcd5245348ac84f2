"""How an endpoint's value reads to a person, one way on every page (the admin's lists and
forms, a command's timeline, diagnostics, the chart): a bool as ``true``/``false`` (the words
the forms and the API take), a number without a float's noise and with its endpoint's unit
(``30 °C``), an enum's value as it is. A value its endpoint's type does not fit reads as JSON
spells it, so it is never mistaken for one that does."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from devices.models import DeviceProfileEndpoint, EndpointDataType
from devices.values import value_has_type

NO_VALUE = "—"
SIGNIFICANT_DIGITS = 10  # 0.1 + 0.2 reads 0.3; a reading's own precision is kept


def number_text(number: float) -> str:
    """``24`` for 24.0, ``32.5``, ``0.3`` for 0.30000000000000004."""
    if isinstance(number, float) and number.is_integer() and abs(number) < 1e15:
        return str(int(number))
    return str(number) if isinstance(number, int) else f"{number:.{SIGNIFICANT_DIGITS}g}"


def value_text(value: Any, *, data_type: str = "", unit: str = "") -> str:
    """``value`` as a person reads it; ``data_type`` and ``unit`` are its endpoint's ("":
    unknown, the value's own type decides)."""
    if value is None:
        return NO_VALUE
    if data_type and not value_has_type(data_type, value):
        return json.dumps(value, default=str)
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        text = number_text(value)
        return f"{text} {unit}" if unit else text
    if isinstance(value, str):
        return value
    return json.dumps(value, default=str)


def endpoint_value_text(value: Any, endpoint: DeviceProfileEndpoint | None) -> str:
    """``value`` in the type and unit of ``endpoint`` (a profile endpoint; None: unknown)."""
    if endpoint is None:
        return value_text(value)
    unit = endpoint.unit if endpoint.data_type == EndpointDataType.NUMBER else ""
    return value_text(value, data_type=endpoint.data_type, unit=unit)


def params_text(
    params: Any, endpoints: Mapping[str, DeviceProfileEndpoint | None] | None = None
) -> str:
    """A command's parameters or a reported state, ``io1=true, fan=2``: each value in the
    type and unit of the endpoint its key names, where ``endpoints`` knows it."""
    if not isinstance(params, Mapping):
        return value_text(params)
    known = endpoints or {}
    return ", ".join(
        f"{key}={endpoint_value_text(value, known.get(key))}" for key, value in params.items()
    )
