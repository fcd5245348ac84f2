"""The rows the services insert set-based are frozen dataclasses named for their tables (a
misspelt column or a value of the wrong type is a type error); ``as_row`` is the one place
one becomes the field name -> value mapping that ``common.sql`` and ``objects.create`` take."""

from __future__ import annotations

from dataclasses import fields, is_dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from _typeshed import DataclassInstance


def as_row(row: DataclassInstance) -> dict[str, object]:
    """Field name -> value, shallow: a JSON value goes to its column as it is, not copied. A
    field holding a dataclass (columns several rows share) contributes its own columns."""
    out: dict[str, object] = {}
    for f in fields(row):
        value = getattr(row, f.name)
        if is_dataclass(value) and not isinstance(value, type):
            out |= as_row(value)
        else:
            out[f.name] = value
    return out
