"""The configuration version: one row (``ConfigVersion``) that every write of a configuration
table moves in the writing transaction, so a per-process cache of configuration (rules,
devices, endpoints, profiles, farms) learns with one tiny read whether it still holds what the
database holds, and a change is seen by the next reading, not after a time to live.

Database triggers move it, so no writer can forget: a service, the admin, a bulk update, a
queryset ``update()``, a migration or SQL typed by hand. Each app names its configuration
tables (``config_tables_watch``) and the columns that are not configuration (a device's last
message, an endpoint's last value): writing only those moves nothing, so readings never do.
The triggers are dropped before every ``migrate`` and installed again after it: a trigger
names the columns it watches, and PostgreSQL refuses to change the type of such a column, a
migration taken backwards may drop the version's table under a trigger that writes it, and a
table rebuilt by a migration (SQLite rebuilds tables to alter them) loses its triggers.

The value is fresh on every move (a sequence on PostgreSQL, a random 63-bit number on
SQLite), never ``+ 1``: after a rollback a counter would hand out the same number again, and a
cache built inside the rolled-back transaction would pass for the state after it.

A move takes the row's lock until commit, so configuration writes queue behind each other
(they are rare and short); readers never wait."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from django.db import connection, models
from django.db.backends.base.base import BaseDatabaseWrapper

from common.hot_sql import hot_rows
from common.models import ConfigVersion

TABLE = ConfigVersion._meta.db_table
_PG_SEQUENCE = f"{TABLE}_seq"
_PG_FUNCTION = f"{TABLE}_move"
_ROW = 1


@dataclass(frozen=True)
class ConfigTable:
    """A configuration table, and its columns whose writes are not configuration."""

    model: type[models.Model]
    runtime_columns: frozenset[str] = frozenset()

    @property
    def table(self) -> str:
        return self.model._meta.db_table

    def watched_columns(self) -> list[str]:
        columns = (f.column for f in self.model._meta.concrete_fields)
        return sorted(c for c in columns if c and c not in self.runtime_columns)


_tables: dict[str, ConfigTable] = {}


def config_tables_watch(model: type[models.Model], *, runtime: Sequence[str] = ()) -> None:
    """Every write of ``model``'s table moves the version, but a write of ``runtime`` columns
    only (called from the owning app's ``ready``)."""
    watched = ConfigTable(model, frozenset(runtime))
    _tables[watched.table] = watched


def config_tables() -> list[ConfigTable]:
    return [_tables[name] for name in sorted(_tables)]


def config_version() -> int | None:
    """The version as this transaction sees it (one indexed read of one row); None before
    the first configuration write (a fresh or flushed database)."""
    rows = hot_rows(f"SELECT version FROM {TABLE} WHERE id = {_ROW}")
    return int(rows[0][0]) if rows else None


def config_version_triggers_install(conn: BaseDatabaseWrapper | None = None) -> list[str]:
    """(Re)create the triggers of every watched table present; the tables given triggers.
    Each watches the columns its table has now, so the schema of any migration state will do."""
    conn = conn or connection
    present = set(conn.introspection.table_names())
    if TABLE not in present:
        return []
    with conn.cursor() as cursor:
        tables: list[tuple[str, list[str]]] = []
        for t in config_tables():
            if t.table not in present:
                continue
            have = {c.name for c in conn.introspection.get_table_description(cursor, t.table)}
            columns = [c for c in t.watched_columns() if c in have]
            if columns:
                tables.append((t.table, columns))
        if conn.vendor == "postgresql":
            _install_postgresql(cursor, tables)
        elif conn.vendor == "sqlite":
            _install_sqlite(cursor, tables)
        else:  # pragma: no cover - the project runs on these two
            raise NotImplementedError(conn.vendor)
    return [table for table, _ in tables]


def config_version_triggers_drop(conn: BaseDatabaseWrapper | None = None) -> int:
    """Drop every configuration version trigger (before a migration: see the module's
    docstring); how many there were."""
    conn = conn or connection
    with conn.cursor() as cursor:
        if conn.vendor == "postgresql":
            cursor.execute(
                "SELECT t.tgname, c.relname FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid "
                "WHERE t.tgname LIKE 'config_version_%%' AND NOT t.tgisinternal"
            )
            found = cursor.fetchall()
            for name, table in found:
                cursor.execute(f'DROP TRIGGER IF EXISTS {name} ON "{table}"')
        else:
            cursor.execute(
                "SELECT name, tbl_name FROM sqlite_master "
                "WHERE type = 'trigger' AND name LIKE 'config_version_%'"
            )
            found = cursor.fetchall()
            for name, _table in found:
                cursor.execute(f"DROP TRIGGER IF EXISTS {name}")
    return len(found)


def _trigger_name(table: str, suffix: str = "") -> str:
    return f"config_version_{table}{suffix}"


def _install_postgresql(cursor: Any, tables: Sequence[tuple[str, list[str]]]) -> None:
    """One statement-level trigger per table: a bulk write of a thousand rows moves once."""
    cursor.execute(f"CREATE SEQUENCE IF NOT EXISTS {_PG_SEQUENCE}")
    cursor.execute(
        f"CREATE OR REPLACE FUNCTION {_PG_FUNCTION}() RETURNS trigger LANGUAGE plpgsql AS $$ "
        f"BEGIN INSERT INTO {TABLE} (id, version) VALUES ({_ROW}, nextval('{_PG_SEQUENCE}')) "
        "ON CONFLICT (id) DO UPDATE SET version = EXCLUDED.version; RETURN NULL; END $$"
    )
    for table, watched in tables:
        columns = ", ".join(f'"{c}"' for c in watched)
        cursor.execute(
            f"CREATE OR REPLACE TRIGGER {_trigger_name(table)} AFTER INSERT OR DELETE OR "
            f'UPDATE OF {columns} ON "{table}" FOR EACH STATEMENT '
            f"EXECUTE FUNCTION {_PG_FUNCTION}()"
        )


def _install_sqlite(cursor: Any, tables: Sequence[tuple[str, list[str]]]) -> None:
    """SQLite has row-level triggers only, and no sequence: a random number stands for it."""
    move = f"INSERT OR REPLACE INTO {TABLE} (id, version) VALUES ({_ROW}, abs(random() / 2));"
    for table, watched in tables:
        columns = ", ".join(f'"{c}"' for c in watched)
        events = {
            "_ins": "INSERT",
            "_del": "DELETE",
            "_upd": f"UPDATE OF {columns}",
        }
        for suffix, event in events.items():
            name = _trigger_name(table, suffix)
            cursor.execute(f"DROP TRIGGER IF EXISTS {name}")
            cursor.execute(
                f'CREATE TRIGGER {name} AFTER {event} ON "{table}" FOR EACH ROW BEGIN {move} END'
            )


def config_version_triggers_installed(conn: BaseDatabaseWrapper | None = None) -> set[str]:
    """The watched tables that have their triggers, as the database says."""
    conn = conn or connection
    with conn.cursor() as cursor:
        if conn.vendor == "postgresql":
            cursor.execute(
                "SELECT DISTINCT event_object_table FROM information_schema.triggers "
                "WHERE trigger_name LIKE 'config_version_%%'"
            )
        else:
            cursor.execute(
                "SELECT DISTINCT tbl_name FROM sqlite_master "
                "WHERE type = 'trigger' AND name LIKE 'config_version_%'"
            )
        return {row[0] for row in cursor.fetchall()}


T = TypeVar("T")


class ConfigCache(Generic[T]):
    """What ``load`` builds from the configuration, kept per process for one version: built
    again (once, whichever thread asks first) when the version moved. ``load`` runs after the
    version was read, so what it holds is never older than the version it is kept under."""

    def __init__(self, load: Callable[[], T]) -> None:
        self._load = load
        self._lock = threading.Lock()
        self._version: int | None = None
        self._value: T | None = None
        self.loads = 0  # how many times it was built, for tests and progress lines

    def get(self, version: int | None) -> T:
        with self._lock:
            if self._value is None or self._version != version or version is None:
                self._value = self._load()
                self._version = version
                self.loads += 1
            return self._value

    def clear(self) -> None:
        with self._lock:
            self._value, self._version = None, None
