"""Model instances from hand-written SQL (``common.hot_sql``): a hot statement that joins
several tables reads each one's columns in the model's order, and each becomes the instance
the rest of the code already takes, as the ORM would have built it.

Why instances and not tuples: the code past the read (gates, transitions, the RPC request)
works on models, and the ORM's cost on a hot path is building and adapting queries, not
making objects. The values go through the same converters the ORM applies (SQLite returns
text for a timestamp and for JSON; PostgreSQL returns JSON as text on Django's connection),
so an instance read here equals one read by the ORM."""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any, TypeVar

from django.db import connection, models
from django.db.models.expressions import Col

M = TypeVar("M", bound=models.Model)

Converter = Callable[[Any, Any, Any], Any]

_shapes: dict[tuple[type[models.Model], str], list[tuple[Col, list[Converter]]]] = {}


def model_columns(model: type[models.Model], alias: str) -> str:
    """``alias.column, …`` for every concrete column of ``model``, in the order
    ``model_from_row`` reads them back."""
    return ", ".join(f"{alias}.{f.column}" for f in model._meta.concrete_fields)


def model_width(model: type[models.Model]) -> int:
    """How many values of a row ``model_columns`` selects."""
    return len(model._meta.concrete_fields)


def _shape(model: type[models.Model]) -> list[tuple[Col, list[Converter]]]:
    """Each column's converters, worked out once per model and database (as the ORM's
    compiler does on every query)."""
    key = (model, connection.vendor)
    shape = _shapes.get(key)
    if shape is None:
        shape = []
        for field in model._meta.concrete_fields:
            col = Col(model._meta.db_table, field)
            converters = [
                *connection.ops.get_db_converters(col),
                *field.get_db_converters(connection),
            ]
            shape.append((col, converters))
        _shapes[key] = shape
    return shape


def model_from_row(model: type[M], row: Sequence[Any], start: int = 0) -> M | None:
    """The instance of ``model`` whose columns start at ``start`` in ``row`` (as
    ``model_columns`` selected them); None when its primary key is NULL (an outer join that
    found nothing)."""
    values: list[Any] = []
    for offset, (col, converters) in enumerate(_shape(model)):
        value = row[start + offset]
        for convert in converters:
            value = convert(value, col, connection)
        values.append(value)
    pk_index = model._meta.concrete_fields.index(model._meta.pk)
    if values[pk_index] is None:
        return None
    names = [f.attname for f in model._meta.concrete_fields]
    return model.from_db(connection.alias, names, values)


def db_time(value: Any) -> Any:
    """A datetime parameter as the ORM stores it (SQLite: UTC text, PostgreSQL: as is), so
    a hand-written comparison or write agrees with the ORM's rows."""
    if value is None:
        return None
    return connection.ops.adapt_datetimefield_value(value)


@functools.cache
def _column_shape(model: type[models.Model], name: str, vendor: str) -> tuple[Col, list[Converter]]:
    """The converters the ORM applies to the column of ``model.name`` on this database,
    worked out once per column and database."""
    field = model._meta.get_field(name)
    assert isinstance(field, models.Field)
    col = Col(model._meta.db_table, field)
    return col, [*connection.ops.get_db_converters(col), *field.get_db_converters(connection)]


def column_value(model: type[models.Model], name: str, raw: object) -> object:
    """One selected column's value as the ORM would return it: SQLite returns text for a
    timestamp (a subquery's or a join's alike), and both databases JSON as text."""
    col, converters = _column_shape(model, name, connection.vendor)
    for convert in converters:
        raw = convert(raw, col, connection)
    return raw


def column_time(model: type[models.Model], name: str, raw: object) -> datetime | None:
    """``column_value`` of a timestamp column (None stays None)."""
    value = column_value(model, name, raw)
    assert value is None or isinstance(value, datetime)
    return value
