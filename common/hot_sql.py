"""Hand-written SQL for the statements a crossing runs on every reading (ingest, evaluate,
dispatch, reconcile): each stage keeps its statements in one module and runs them here.

Why not the ORM there: at a batch of one, Django's query building and psycopg's client-side
adaptation cost as much CPU as PostgreSQL spends running the statement (docs/benchmarks.md).
On PostgreSQL a statement runs on a server-binding cursor, prepared where the connection
prepares statements (psycopg's ``prepare_threshold`` in the database's ``OPTIONS`` is not
None), so the server parses and plans it once per connection and the client sends only its
parameters. Django leaves ``prepare_threshold`` None unless the settings name one
(``config.env`` does), and a transaction-pooling PgBouncer (``DATABASE_TRANSACTION_POOLING``)
forces it None: a statement prepared on one server session would be missing from the next
transaction's.
It shares Django's connection, so it takes part in ``transaction.atomic`` like any query.
On SQLite (the embedded default) it goes through Django's cursor, which speaks the same
``%s`` placeholders. Write statements both databases run: ``IN`` lists from ``in_list``
rather than arrays, ``ON CONFLICT`` and ``RETURNING`` (SQLite 3.35 and later).

``statements_counted`` counts statements of both kinds, so the cost tests keep counting
and can fail when a hot statement goes back through the ORM; Django's query log
(``CaptureQueriesContext``, ``DEBUG``) lists hot statements too, on both databases."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, cast

from django.db import connection

Params = Sequence[Any]

_state = threading.local()


@dataclass
class StatementCount:
    """Statements run while counting: ``hot`` through this module, ``orm`` any other."""

    hot: list[str] = field(default_factory=list)
    orm: list[str] = field(default_factory=list)

    @property
    def total(self) -> int:
        return len(self.hot) + len(self.orm)


def _counter() -> StatementCount | None:
    return getattr(_state, "counter", None)


def _in_hot() -> bool:
    return bool(getattr(_state, "in_hot", False))


@contextmanager
def statements_counted() -> Iterator[StatementCount]:
    """Count the statements this thread runs inside the block, each by the way it went."""
    count = StatementCount()

    def wrapper(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        if not _in_hot():
            count.orm.append(sql)
        return execute(sql, params, many, context)

    previous = _counter()
    _state.counter = count
    try:
        with connection.execute_wrapper(wrapper):
            yield count
    finally:
        _state.counter = previous


def in_list(values: Sequence[Any]) -> tuple[str, list[Any]]:
    """``(%s, %s, …)`` for an ``IN`` test and its parameters. The statement's text depends
    on the length only, so a stage that runs batches of one and of fifty prepares two."""
    if not values:
        return "(NULL)", []
    return "(" + ", ".join(["%s"] * len(values)) + ")", list(values)


def json_param(value: Any) -> Any:
    """A JSON value as a parameter of a ``jsonb`` (PostgreSQL) or JSON text (SQLite) column."""
    if connection.vendor == "postgresql":
        from psycopg.types.json import Jsonb

        return Jsonb(value)
    return json.dumps(value)


def json_value(raw: Any) -> Any:
    """A JSON column's value as read back: psycopg decodes ``jsonb``, SQLite returns text."""
    return json.loads(raw) if isinstance(raw, str | bytes) else raw


def _counted(sql: str) -> None:
    counter = _counter()
    if counter is not None:
        counter.hot.append(sql)


@contextmanager
def _cursor() -> Iterator[Any]:
    """A prepared-statement cursor on Django's own PostgreSQL connection, else Django's."""
    _counted_flag = _in_hot()
    _state.in_hot = True
    try:
        if connection.vendor == "postgresql":
            import psycopg

            connection.ensure_connection()
            with psycopg.Cursor(connection.connection) as cursor:
                yield cursor
        else:
            with connection.cursor() as cursor:
                yield cursor
    finally:
        _state.in_hot = _counted_flag


def _statements_prepared() -> bool:
    """Whether this connection keeps prepared statements: psycopg's own switch, set from the
    database's ``OPTIONS`` (``config.env_database.database_from_env``)."""
    return connection.connection.prepare_threshold is not None


def _execute(cursor: Any, sql: str, params: Params) -> None:
    _counted(sql)
    if connection.vendor != "postgresql":
        cursor.execute(sql, params)  # Django's cursor: logged like any query
        return
    started = time.monotonic()
    cursor.execute(sql, params, prepare=_statements_prepared())
    if connection.queries_logged:  # CaptureQueriesContext and DEBUG see it as on SQLite
        elapsed = time.monotonic() - started
        # With its parameters in, as Django logs its own: the log's text runs (EXPLAIN) alone.
        shown = cast(Any, connection.ops).compose_sql(sql, params) if params else sql
        connection.queries_log.append({"sql": shown, "time": f"{elapsed:.3f}"})


def hot_rows(sql: str, params: Params = ()) -> list[tuple[Any, ...]]:
    """Run a statement that returns rows (a SELECT, or a write with RETURNING)."""
    with _cursor() as cursor:
        _execute(cursor, sql, params)
        return [tuple(row) for row in cursor.fetchall()]


def hot_run(sql: str, params: Params = ()) -> int:
    """Run a statement for its effect; returns the rows it touched."""
    with _cursor() as cursor:
        _execute(cursor, sql, params)
        return int(cursor.rowcount)
