"""Set-based SQL the ORM does not offer: multi-row INSERT … ON CONFLICT DO NOTHING RETURNING,
which tells the caller exactly which rows were new (PostgreSQL and SQLite ≥ 3.35), and the
batch compare-and-set UPDATE (``GuardedUpdate``, which ``common.ledger`` runs for every move
of every ledger). Both run through ``common.hot_sql``: the stages call them on
every batch, so on PostgreSQL they are prepared statements (one text per set of columns,
however many rows), and the cost tests count them as hand-written, not as the ORM's."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

from django.db import connection, models

from common.hot_sql import hot_rows

# (match, set) pairs of a compare-and-set UPDATE: the values a row must still hold, the new ones.
Pairs = Sequence[tuple[Mapping[str, Any], Mapping[str, Any]]]

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
    if connection.vendor == "postgresql":
        return _insert_unnest(head, tail, fields, rows)
    return _insert_values(head, tail, fields, rows)


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
    head: str, tail: str, fields: list[Any], rows: Sequence[dict[str, Any]]
) -> list[tuple[Any, ...]]:
    """PostgreSQL: one array parameter per column, so the statement stays small however many
    rows it carries (a VALUES list of thousands of placeholders costs more to bind than to run)."""
    names = [f"c{i}" for i in range(len(fields))]
    columns = [[row[field.name] for row in rows] for field in fields]
    relation, params = unnest_relation(fields, names, columns, json_none_is_null=False)
    return hot_rows(f"{head}SELECT * FROM {relation}{tail}", params)


def _insert_values(
    head: str, tail: str, fields: list[Any], rows: Sequence[dict[str, Any]]
) -> list[tuple[Any, ...]]:
    one = "(" + ", ".join(["%s"] * len(fields)) + ")"
    per = max(1, MAX_PARAMS // len(fields))
    out: list[tuple[Any, ...]] = []
    for start in range(0, len(rows), per):
        chunk = rows[start : start + per]
        params = [f.get_db_prep_save(row[f.name], connection) for row in chunk for f in fields]
        out.extend(hot_rows(f"{head}VALUES {', '.join([one] * len(chunk))}{tail}", params))
    return out


@dataclass(frozen=True)
class GuardedUpdate:
    """The compare-and-set UPDATE of many rows, each with its own values, as text both
    databases run: ``v`` is the relation of the rows' (match, set) values, ``sql`` the
    ``UPDATE … FROM v … RETURNING`` of the primary key and the ``returning`` columns, read
    from the rows as the update left them. The text depends on the columns only."""

    fields: list[Any]
    names: list[str]
    keys: list[str]
    sql: str

    @classmethod
    def of(
        cls,
        model: type[models.Model],
        match: Sequence[str],
        change: Sequence[str],
        *,
        bump: str | None = None,
        returning: Sequence[str] = (),
    ) -> GuardedUpdate:
        meta = model._meta
        qn = connection.ops.quote_name
        table = qn(meta.db_table)
        matched: list[Any] = [meta.get_field(name) for name in match]
        changed: list[Any] = [meta.get_field(name) for name in change]
        names = [*(f"m{i}" for i in range(len(matched))), *(f"s{i}" for i in range(len(changed)))]
        sets = [f"{qn(f.column)} = v.s{i}" for i, f in enumerate(changed)]
        if bump is not None:
            bumped = qn(cast(Any, meta.get_field(bump)).column)
            sets.append(f"{bumped} = {bumped} + 1")
        where = " AND ".join(f"{table}.{qn(f.column)} = v.m{i}" for i, f in enumerate(matched))
        back = [cast(Any, meta.pk), *(meta.get_field(name) for name in returning)]
        ret = ", ".join(f"{table}.{qn(f.column)}" for f in back)
        sql = f"UPDATE {table} SET {', '.join(sets)} FROM v WHERE {where} RETURNING {ret}"
        keys = [*match, *(f"set:{k}" for k in change)]
        return cls([*matched, *changed], names, keys, sql)

    def flat(self, rows: Pairs) -> list[dict[str, Any]]:
        return [{**match, **{f"set:{k}": v for k, v in change.items()}} for match, change in rows]

    def relation(self, rows: Pairs) -> tuple[str, list[Any]]:
        """PostgreSQL: ``v`` as one array parameter per column (see ``unnest_relation``)."""
        flat = self.flat(rows)
        columns = [[row[key] for row in flat] for key in self.keys]
        return unnest_relation(self.fields, self.names, columns, json_none_is_null=True)

    def run(self, rows: Pairs) -> list[tuple[Any, ...]]:
        """The rows that moved, as ``RETURNING`` gives them: one statement on PostgreSQL,
        one per ``MAX_PARAMS`` worth of values on SQLite."""
        if connection.vendor == "postgresql":
            relation, params = self.relation(rows)
            return hot_rows(f"WITH v AS (SELECT * FROM {relation}) {self.sql}", params)
        flat = self.flat(rows)
        one = "(" + ", ".join(["%s"] * len(self.fields)) + ")"
        moved: list[tuple[Any, ...]] = []
        per = max(1, MAX_PARAMS // len(self.fields))
        for start in range(0, len(flat), per):
            chunk = flat[start : start + per]
            params = [
                f.get_db_prep_save(row[key], connection)
                for row in chunk
                for key, f in zip(self.keys, self.fields, strict=True)
            ]
            tuples = ", ".join([one] * len(chunk))
            sql = f"WITH v({', '.join(self.names)}) AS (VALUES {tuples}) {self.sql}"
            moved.extend(hot_rows(sql, params))
        return moved


def unnest_relation(
    fields: Sequence[Any],
    names: Sequence[str],
    columns: Sequence[Sequence[Any]],
    *,
    json_none_is_null: bool,
    alias: str = "rows_in",
) -> tuple[str, list[Any]]:
    """PostgreSQL: ``rows`` as a relation of one array parameter per column (JSON travels as
    text and is cast back), so a statement stays small however many rows it carries. A JSON
    ``None`` is SQL NULL when ``json_none_is_null`` (an update, as the ORM stores it), else
    JSON null (an insert, as before)."""
    selects, casts, params = [], [], []
    for name, field, values in zip(names, fields, columns, strict=True):
        if isinstance(field, models.JSONField):
            casts.append("%s::text[]")
            selects.append(f"{name}::jsonb AS {name}")
            params.append(
                [None if v is None and json_none_is_null else json.dumps(v) for v in values]
            )
        else:
            casts.append(f"%s::{field.cast_db_type(connection)}[]")
            selects.append(name)
            params.append(list(values))
    relation = (
        f"(SELECT {', '.join(selects)} FROM unnest({', '.join(casts)}) "
        f"AS u({', '.join(names)})) AS {alias}"
    )
    return relation, params
