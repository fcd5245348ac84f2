"""Shared fixtures. PostgreSQL-only tests carry the ``postgres`` marker and are skipped, with
the reason printed, when the suite runs on the embedded SQLite default."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from django.db import connection
from kombu import Queue

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


# Per-run AMQP queues expire this long after their last use (no consumer, no redeclare), so an
# aborted run leaves nothing behind on the shared RabbitMQ for long.
AMQP_TEST_QUEUE_EXPIRES_S = 600.0


@pytest.fixture(scope="session", autouse=True)
def _private_broker_keys() -> Iterator[None]:
    """Give this run its own key space on a shared broker, so queued tasks of another run on
    the same machine are neither consumed nor purged by ours (and vice versa). Redis: a key
    prefix. RabbitMQ: every stage queue renamed ``test-<id>-<stage>``, keeping the stage name
    as its alias so routes, ``queue="events"`` and the worker's queue list still resolve. (A
    virtual host per run would need rabbitmqctl or the management API; declaring queues
    needs nothing beyond the broker URL.)"""
    from config.celery import app as celery_app

    run = f"test-{uuid.uuid4().hex[:8]}"
    url = celery_app.conf.broker_url
    if url.startswith(("redis://", "rediss://")):
        options = dict(celery_app.conf.broker_transport_options or {})
        options["global_keyprefix"] = f"{run}:"
        celery_app.conf.broker_transport_options = options
    if not url.startswith(("amqp://", "amqps://", "pyamqp://")):
        yield
        return
    queues = [
        Queue(
            f"{run}-{queue.alias or queue.name}",
            routing_key=f"{run}-{queue.alias or queue.name}",
            alias=queue.alias or queue.name,
            expires=AMQP_TEST_QUEUE_EXPIRES_S,
        )
        for queue in celery_app.conf.task_queues
    ]
    celery_app.conf.task_queues = queues
    for cached in ("queues", "default_queue", "router", "send_task_message"):
        celery_app.amqp.__dict__.pop(cached, None)  # built from the old list if already used
    yield
    _queues_delete(celery_app, queues)


def _queues_delete(celery_app: Any, queues: list[Queue]) -> None:
    """Delete this run's queues now rather than after x-expires; best effort."""
    with celery_app.connection_for_write() as conn:
        errors = (*conn.connection_errors, *conn.channel_errors)
        with contextlib.suppress(*errors):
            for queue in queues:
                queue.bind(conn.default_channel).delete()


@pytest.fixture
def on_postgres() -> bool:
    return connection.vendor == "postgresql"


@pytest.fixture(autouse=True)
def _fresh_coordination_cache() -> None:
    """Each test starts with empty coordination keys (Redis outlives test databases)."""
    from django.core.cache import cache

    cache.clear()
