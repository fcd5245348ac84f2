"""Workers keep their database connections from one task to the next.

Celery's Django fix-up closes every connection after each task unless ``CELERY_DB_REUSE_MAX``
is set; a new PostgreSQL connection per task cost a measurable share of each stage (see
docs/architecture.md, "Set-based stages"). With reuse on, a connection that broke (the
server restarted) or outlived ``DATABASE_CONN_MAX_AGE`` is closed before the next task
instead, as Django does between web requests, and ``CONN_HEALTH_CHECKS`` tests an idle one
before use.
"""

from __future__ import annotations

from typing import Any

from celery.signals import task_prerun
from django.db import connections


def _connections_checked(sender: Any = None, **_: Any) -> None:
    if getattr(getattr(sender, "request", None), "is_eager", False):
        return  # an eager task runs inside its caller's transaction
    for conn in connections.all(initialized_only=True):
        if not conn.in_atomic_block:
            conn.close_if_unusable_or_obsolete()


def connection_reuse_install() -> None:
    task_prerun.connect(_connections_checked, weak=False, dispatch_uid="db-connections-checked")
