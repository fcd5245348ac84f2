"""Shared fixtures. PostgreSQL-only tests carry the ``postgres`` marker and are skipped, with
the reason printed, when the suite runs on the embedded SQLite default."""

from __future__ import annotations

import pytest
from django.db import connection

pytest_plugins = ["tests.mqtt_fixtures"]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    from django.conf import settings

    engine = settings.DATABASES["default"]["ENGINE"]
    if "postgresql" in engine:
        return
    skip = pytest.mark.skip(
        reason="needs PostgreSQL: set DATABASE_URL=postgres://... (see .ci/run)"
    )
    for item in items:
        if "postgres" in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def on_postgres() -> bool:
    return connection.vendor == "postgresql"


@pytest.fixture(autouse=True)
def _fresh_coordination_cache() -> None:
    """Each test starts with empty coordination keys (Redis outlives test databases)."""
    from django.core.cache import cache

    cache.clear()
