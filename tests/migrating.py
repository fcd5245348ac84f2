"""Moving the test database between migration states, as ``migrate`` would.

The migration tests drive Django's executor directly, which sends none of the signals the
``migrate`` command sends: the configuration version's triggers (``common.config_version``)
are dropped before the move, as before any ``migrate``, and installed again once the schema
is back at the latest state."""

from __future__ import annotations

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
