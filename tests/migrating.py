"""Moving the test database between migration states, as ``migrate`` would.

The migration tests drive Django's executor directly, which sends none of the signals the
``migrate`` command sends: the configuration version's triggers (``common.config_version``)
are dropped before the move, as before any ``migrate``, and installed again once the schema
is back at the latest state."""

from __future__ import annotations

from typing import Any

from django.contrib.contenttypes.models import ContentType
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

from common.config_version import config_version_triggers_drop, config_version_triggers_install


def migrate_to(targets: list[tuple[str, str]] | None = None) -> MigrationExecutor:
    """Migrate to ``targets`` (every app's latest migration when None); the executor used,
    whose loader knows the states on the way."""
    config_version_triggers_drop()
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(targets or executor.loader.graph.leaf_nodes())
    ContentType.objects.clear_cache()
    if targets is None:
        config_version_triggers_install()
    return executor


def schema_catalog(tables: list[str]) -> dict[str, Any]:
    """What a rename must leave alone, for ``tables``: each table's file node (a rewrite
    changes it), the oids of the foreign keys that leave or reach it (a key dropped and added
    again gets a new one), and each table's columns in order."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT relname, relfilenode FROM pg_class WHERE relname = ANY(%s)", [tables]
        )
        nodes = dict(cursor.fetchall())
        cursor.execute(
            "SELECT conname, oid FROM pg_constraint WHERE contype = 'f' AND "
            "(conrelid::regclass::text = ANY(%s) OR confrelid::regclass::text = ANY(%s))",
            [tables, tables],
        )
        keys = dict(cursor.fetchall())
        cursor.execute(
            "SELECT table_name, column_name FROM information_schema.columns "
            "WHERE table_name = ANY(%s) ORDER BY table_name, ordinal_position",
            [tables],
        )
        columns: dict[str, list[str]] = {}
        for table, column in cursor.fetchall():
            columns.setdefault(table, []).append(column)
    return {"nodes": nodes, "keys": keys, "columns": columns}
