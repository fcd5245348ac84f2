"""Endpoint value checks shared by ingestion (type) and the safety gates (type + constraints)."""

from __future__ import annotations

import math
from typing import Any, Protocol

from common.json_types import JsonValue
from devices.models import EndpointDataType


class EndpointConstraints(Protocol):
    """What a value is checked against: a catalogue row or a spec about to become one."""

    @property
    def data_type(self) -> str: ...
    @property
    def min_value(self) -> float | None: ...
    @property
    def max_value(self) -> float | None: ...
    @property
    def allowed_values(self) -> list[JsonValue] | None: ...


def value_has_type(data_type: str, value: Any) -> bool:
    if data_type == EndpointDataType.BOOL:
        return isinstance(value, bool)
    if data_type == EndpointDataType.NUMBER:
        return (
            isinstance(value, int | float)
            and not isinstance(value, bool)
            and math.isfinite(float(value))
        )
    if data_type == EndpointDataType.ENUM:
        return isinstance(value, str) and "\x00" not in value  # jsonb cannot store NUL
    return False


def value_violation(endpoint: EndpointConstraints, value: Any) -> str | None:
    """None when ``value`` may be written to ``endpoint``; else the reason code's value."""
    if not value_has_type(endpoint.data_type, value):
        return "value_wrong_type"
    if endpoint.data_type == EndpointDataType.NUMBER:
        if endpoint.min_value is not None and value < endpoint.min_value:
            return "value_out_of_range"
        if endpoint.max_value is not None and value > endpoint.max_value:
            return "value_out_of_range"
    if endpoint.allowed_values and value not in endpoint.allowed_values:
        return "value_not_allowed"
    return None
