"""The real servers as a test hands them to a process it starts: the variables that name
them, and the private Redis databases and MQTT sessions that keep that process's queues and
shares apart from every other test's."""

from __future__ import annotations

from urllib.parse import urlsplit, urlunsplit

REAL_SERVERS = ("DATABASE_URL", "CELERY_BROKER_URL", "REDIS_URL", "MQTT_URL")


def with_path(url: str, path: str) -> str:
    return urlunsplit(urlsplit(url)._replace(path=path))


def private_servers_env(
    env: dict[str, str], *, run: str, name: str, redis_db: int, celery_redis_db: int
) -> dict[str, str]:
    """Redis databases of its own, and a shared group and bridge slots of its own: other
    runs' sessions take no share of its messages."""
    broker = env["CELERY_BROKER_URL"]
    return {
        "REDIS_URL": with_path(env["REDIS_URL"], f"/{redis_db}"),
        "CELERY_BROKER_URL": (
            with_path(broker, f"/{celery_redis_db}") if broker.startswith("redis") else broker
        ),
        "MQTT_SHARED_GROUP": f"{name}-{run}",
        "BRIDGE_SLOT_PREFIX": f"farm-bridge-{name}-{run}",
    }


def child_database_url() -> str:
    """The test database as a ``DATABASE_URL``, for a process a test starts on its rows."""
    from django.db import connection

    db = connection.settings_dict
    if connection.vendor == "sqlite":
        return f"sqlite:///{db['NAME']}"
    auth = db["USER"] + (f":{db['PASSWORD']}" if db["PASSWORD"] else "")
    return f"postgres://{auth}@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}/{db['NAME']}"
