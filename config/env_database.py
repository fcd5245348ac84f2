"""``DATABASE_URL`` and what the connection needs beside it: the embedded SQLite default,
psycopg's prepared statements for the hand-written hot path, and transaction pooling."""

from __future__ import annotations

from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from config.env import SettingError, _get, env_bool, env_int, env_str

# Behind a transaction-pooling PgBouncer each transaction may run on another server session,
# so nothing may outlive one: no prepared statement (psycopg's prepare_threshold None; the
# hand-written hot SQL in ``common.hot_sql`` follows it) and no server-side cursor (Django's
# ``DISABLE_SERVER_SIDE_CURSORS``: ``.iterator()`` declares a cursor WITH HOLD outside a
# transaction and fetches it in the next ones).
TRANSACTION_POOLING_OPTIONS: dict[str, Any] = {"prepare_threshold": None}


def database_from_env(base_dir: Path) -> dict[str, Any]:
    """``DATABASE_URL``: ``postgres://user:pass@host:port/name`` or ``sqlite:///path``;
    ``DATABASE_TRANSACTION_POOLING`` (read either way, so a bad value always stops start-up)
    says PostgreSQL is reached through a transaction-pooling PgBouncer."""
    pooling = env_bool("DATABASE_TRANSACTION_POOLING", False)
    raw = _get("DATABASE_URL")
    if raw is None:
        return _sqlite(base_dir / "var" / "farm.sqlite3")
    parts = urlsplit(raw)
    if parts.scheme == "sqlite":
        path = unquote(parts.path)
        if not path or path == "/":
            raise SettingError("DATABASE_URL", raw, "sqlite URL needs a file path")
        return _sqlite(Path(path[1:] if path.startswith("//") else path))
    if parts.scheme not in {"postgres", "postgresql", "pgsql"}:
        raise SettingError("DATABASE_URL", raw, "scheme must be postgres:// or sqlite:///")
    name = unquote(parts.path.lstrip("/"))
    if not name:
        raise SettingError("DATABASE_URL", raw, "missing database name")
    try:
        port = parts.port
    except ValueError:
        raise SettingError("DATABASE_URL", raw, "port is not a number") from None
    options: dict[str, Any] = {k: v[-1] for k, v in parse_qs(parts.query).items()}
    options["prepare_threshold"] = _prepare_threshold(raw, options.get("prepare_threshold"))
    if pooling:
        options.update(TRANSACTION_POOLING_OPTIONS)
    return {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": name,
        "USER": unquote(parts.username or ""),
        "PASSWORD": unquote(parts.password or ""),
        "HOST": parts.hostname or "",
        "PORT": str(port or ""),
        "CONN_MAX_AGE": env_int("DATABASE_CONN_MAX_AGE", 300),
        "CONN_HEALTH_CHECKS": True,
        "DISABLE_SERVER_SIDE_CURSORS": pooling,
        "OPTIONS": options,
        "TEST": {"NAME": env_str("DATABASE_TEST_NAME", f"test_{name}")},
    }


# Django turns psycopg's server-side prepared statements off unless the connection names a
# threshold, and with them off the hot path's ``prepare=True`` (``common.hot_sql``) is a
# no-op: every statement is parsed and planned again. The ORM's statements are not
# prepared whatever the threshold (Django binds their parameters on the client).
PREPARE_THRESHOLD = 5


def _prepare_threshold(raw: str, given: str | None) -> int | None:
    """``?prepare_threshold=N`` (or ``none``, as transaction pooling needs) from the URL."""
    if given is None:
        return PREPARE_THRESHOLD
    if given.lower() == "none":
        return None
    try:
        return int(given)
    except ValueError:
        raise SettingError("DATABASE_URL", raw, "prepare_threshold is a number or none") from None


def _sqlite(path: Path) -> dict[str, Any]:
    path.parent.mkdir(parents=True, exist_ok=True)
    return {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": str(path),
        # Several threads (in-process worker, bridge, simulator) write at once: wait, do not fail.
        "OPTIONS": {
            "timeout": 30,
            "transaction_mode": "IMMEDIATE",
            "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
        },
        # A file, not the in-memory default: worker threads in end-to-end tests share it.
        "TEST": {"NAME": str(path.with_name(f"test_{path.name}"))},
    }
