"""Set-based SQL the ORM does not offer: multi-row INSERT … ON CONFLICT DO NOTHING RETURNING,
which tells the caller exactly which rows were new (PostgreSQL and SQLite ≥ 3.35)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from django.db import connection, models

# SQLite allows 32,766 bound parameters per statement; stay well under it.
MAX_PARAMS = 30_000


def insert_ignore_returning(
    model: type[models.Model],
    rows: Sequence[dict[str, Any]],
    returning: Sequence[str] = ("id",),
) -> list[tuple[Any, ...]]:
    """Insert ``rows`` (field name → value; foreign keys by id), skipping unique conflicts.

    A field a row leaves out gets the model's default (or NULL where the field is nullable),
    as ``Model.objects.create`` would. Returns the ``returning`` columns of the rows actually
    inserted; a conflicting row is absorbed silently, which is how every duplicate in this
    system is made harmless.
    """
    if not rows:
        return []
    meta = model._meta
    rows = _with_defaults(meta, rows)
    fields: list[Any] = [meta.get_field(name) for name in rows[0]]
    qn = connection.ops.quote_name
    columns = ", ".join(qn(f.column) for f in fields)
    ret = ", ".join(qn(getattr(meta.get_field(name), "column", name)) for name in returning)
    head = f"INSERT INTO {qn(meta.db_table)} ({columns}) "
    tail = f" ON CONFLICT DO NOTHING RETURNING {ret}"
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            return _insert_unnest(cursor, head, tail, fields, rows)
        return _insert_values(cursor, head, tail, fields, rows)


def _with_defaults(meta: Any, rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every row with every concrete column but the auto primary key: the given value, else
    the field's default, else NULL for a nullable field (else the database refuses it)."""
    missing = [
        f
        for f in meta.concrete_fields
        if not f.primary_key and f.name not in rows[0] and (f.has_default() or f.null)
    ]
    if not missing:
        return list(rows)
    return [
        {**row, **{f.name: f.get_default() if f.has_default() else None for f in missing}}
        for row in rows
    ]


def _insert_unnest(
    cursor: Any, head: str, tail: str, fields: list[Any], rows: Sequence[dict[str, Any]]
) -> list[tuple[Any, ...]]:
    """PostgreSQL: one array parameter per column, so the statement stays small however many
    rows it carries (a VALUES list of thousands of placeholders costs more to bind than to run)."""
    selects, casts, params = [], [], []
    for i, field in enumerate(fields):
        is_json = isinstance(field, models.JSONField)
        db_type = "text" if is_json else field.cast_db_type(connection)
        casts.append(f"%s::{db_type}[]")
        selects.append(f"c{i}::jsonb" if is_json else f"c{i}")
        column = [row[field.name] for row in rows]
        params.append([json.dumps(v) for v in column] if is_json else column)
    names = ", ".join(f"c{i}" for i in range(len(fields)))
    cursor.execute(
        f"{head}SELECT {', '.join(selects)} FROM unnest({', '.join(casts)}) AS u({names}){tail}",
        params,
    )
    return [tuple(r) for r in cursor.fetchall()]


def _insert_values(
    cursor: Any, head: str, tail: str, fields: list[Any], rows: Sequence[dict[str, Any]]
) -> list[tuple[Any, ...]]:
    one = "(" + ", ".join(["%s"] * len(fields)) + ")"
    per = max(1, MAX_PARAMS // len(fields))
    out: list[tuple[Any, ...]] = []
    for start in range(0, len(rows), per):
        chunk = rows[start : start + per]
        params = [f.get_db_prep_save(row[f.name], connection) for row in chunk for f in fields]
        cursor.execute(f"{head}VALUES {', '.join([one] * len(chunk))}{tail}", params)
        out.extend(tuple(r) for r in cursor.fetchall())
    return out
