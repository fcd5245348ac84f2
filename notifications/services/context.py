"""The hand-off context, stored losslessly: JSON with tagged ``datetime``, ``date`` and
``Decimal`` values, so a retry hours later renders exactly what the first attempt would."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import date, datetime
from decimal import Decimal
from typing import TypeAlias

from common.json_types import JsonObject, JsonValue

TAG = "__notify__"

# What a template may be handed: JSON plus aware datetimes, dates and decimals.
ContextValue: TypeAlias = (
    "Mapping[str, ContextValue] | Sequence[ContextValue] | datetime | date | Decimal"
    " | str | int | float | bool | None"
)


def context_encode(value: object, path: str = "context") -> JsonValue:
    """JSON-able form of ``value``; ValueError naming the path for anything that would not
    survive storage (a naive datetime, an object). Takes any object: this is the check."""
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, datetime):
        if value.tzinfo is None or value.utcoffset() is None:
            raise ValueError(f"{path}: naive datetime {value!r}; pass an aware datetime")
        return {TAG: "datetime", "value": value.isoformat()}
    if isinstance(value, date):
        return {TAG: "date", "value": value.isoformat()}
    if isinstance(value, Decimal):
        return {TAG: "decimal", "value": str(value)}
    if isinstance(value, list | tuple):
        return [context_encode(v, f"{path}[{i}]") for i, v in enumerate(value)]
    if isinstance(value, Mapping):
        out: JsonObject = {}
        for key, item in value.items():
            if not isinstance(key, str):
                raise ValueError(f"{path}: key {key!r} is not a string")
            if key == TAG:
                raise ValueError(f"{path}: key {TAG!r} is reserved")
            out[key] = context_encode(item, f"{path}.{key}")
        return out
    raise ValueError(f"{path}: cannot store {type(value).__name__} {value!r}")


def context_decode(value: JsonValue) -> ContextValue:
    """The inverse of :func:`context_encode`."""
    if isinstance(value, list):
        return [context_decode(v) for v in value]
    if isinstance(value, dict):
        tag = value.get(TAG)
        if tag == "datetime":
            return datetime.fromisoformat(str(value["value"]))
        if tag == "date":
            return date.fromisoformat(str(value["value"]))
        if tag == "decimal":
            return Decimal(str(value["value"]))
        return {k: context_decode(v) for k, v in value.items()}
    return value


def context_plain(value: JsonValue) -> JsonValue:
    """Stored context as plain JSON for receivers (webhooks): tagged values become ISO
    strings (datetimes keep their offset)."""
    if isinstance(value, list):
        return [context_plain(v) for v in value]
    if isinstance(value, dict):
        if value.get(TAG) in {"datetime", "date", "decimal"}:
            return value["value"]
        return {k: context_plain(v) for k, v in value.items()}
    return value
