"""Shared fixtures. PostgreSQL-only tests carry the ``postgres`` marker and are skipped, with
the reason printed, when the suite runs on the embedded SQLite default."""

from __future__ import annotations

import uuid

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


@pytest.fixture(scope="session", autouse=True)
def _private_broker_keys() -> None:
    """Give this run its own Redis key space on a shared broker, so queued tasks of another
    run on the same machine are neither consumed nor purged by ours (and vice versa)."""
    from config.celery import app as celery_app

    if celery_app.conf.broker_url.startswith(("redis://", "rediss://")):
        options = dict(celery_app.conf.broker_transport_options or {})
        options["global_keyprefix"] = f"test-{uuid.uuid4().hex[:8]}:"
        celery_app.conf.broker_transport_options = options


@pytest.fixture
def on_postgres() -> bool:
    return connection.vendor == "postgresql"


@pytest.fixture(autouse=True)
def _fresh_coordination_cache() -> None:
    """Each test starts with empty coordination keys (Redis outlives test databases)."""
    from django.core.cache import cache

    cache.clear()
