"""How one stage hands work to the next: a Celery task by its name (``config.task_names``),
queued after the transaction commits. Services hand off through this module and never import
a tasks module (a tasks module imports its services; the other way round was an import
circle through ``automation.tasks``). The task sent is the registered one, looked up by name
(every worker loads every app's tasks), so routing, retries and eager mode in tests apply as
to any task.

A hand-off that fails is logged, never raised: beat's sweeps re-derive every pending piece
of work from SQL, so a lost hand-off only delays it."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from celery import Task
from django.db import transaction

from config.celery import app as celery_app
from config.task_names import NOTIFICATION_DELIVER

logger = logging.getLogger(__name__)

# After a nudge failed, a loop that must not wait on the Celery broker sends none for this
# long: each attempt against a broker that is down costs a connect timeout.
NUDGE_PAUSE_S = 5.0


def task_named(name: str) -> Task | None:
    """The registered task; a process that has not imported every app's tasks yet (the web
    process, a script) imports them first."""
    task = celery_app.tasks.get(name)
    if task is None:
        celery_app.loader.import_default_modules()
        task = celery_app.tasks.get(name)
    return task


def _send(task: Task, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    try:
        task.apply_async(args=args, kwargs=kwargs or None)
    except Exception as exc:
        logger.warning("hand-off %s failed (the sweep will pick the work up): %s", task.name, exc)


def enqueue(name: str, *args: Any, **kwargs: Any) -> None:
    """Queue the task now (the caller has committed, or holds no transaction)."""
    task = task_named(name)
    if task is None:
        logger.warning("hand-off %s: no such task here (the sweep will pick the work up)", name)
        return
    _send(task, args, kwargs)


class Nudger:
    """Hand-offs from a loop that must never wait on the Celery broker (the MQTT bridge,
    which has committed what it nudges about): one publish attempt, no retries; after a
    failure none for ``NUDGE_PAUSE_S``, the lost nudges left to beat's sweeps."""

    def __init__(self, pause_s: float = NUDGE_PAUSE_S) -> None:
        self._pause_s = pause_s
        self._paused_until = 0.0
        self._lock = threading.Lock()
        self.lost = 0  # nudges not sent (failed or skipped while paused)

    def __call__(self, name: str, ids: Sequence[int]) -> None:
        if not ids:
            return
        if time.monotonic() < self._paused_until:
            self.lost += 1
            return
        task = task_named(name)
        try:
            if task is None:
                raise LookupError(f"no task {name} here")
            task.apply_async(args=(list(ids),), retry=False)
        except Exception as exc:
            with self._lock:
                self.lost += 1
                self._paused_until = time.monotonic() + self._pause_s
            logger.warning(
                "nudge %s failed (the sweep will pick the work up); none for %.0fs: %s",
                name,
                self._pause_s,
                exc,
            )


def send_now(name: str, *args: Any, queue: str) -> None:
    """Queue the task ``name`` on ``queue`` now, and let a refusal raise: for the one sender
    that must see it, the event bus, which records the lost event itself
    (``EVENT_PUBLISH_FAILED``); every other hand-off is left to the sweeps."""
    celery_app.send_task(name, args=args, queue=queue)


def after_commit(run: Callable[[], object], *, using: str | None = None) -> None:
    """Run ``run`` once the current transaction (of ``using``) commits, at once outside one.
    Robust: what failed is logged, never raised into a caller whose work is committed."""
    transaction.on_commit(run, using=using, robust=True)


def enqueue_on_commit(name: str, *args: Any, **kwargs: Any) -> None:
    """Queue the task once the current transaction commits (at once outside one); a worker
    must never read rows that are not committed yet."""
    after_commit(lambda: enqueue(name, *args, **kwargs))


def notifications_deliver_on_commit(notification_ids: Sequence[int]) -> None:
    """One delivery task per notification (each is retried on its own)."""
    for notification_id in notification_ids:
        enqueue_on_commit(NOTIFICATION_DELIVER, notification_id)
