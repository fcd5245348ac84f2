"""The Celery app: one queue per pipeline stage, late acks, prefetch of one."""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from functools import cache
from typing import Any

from celery import Celery, shared_task
from celery.signals import setup_logging, task_postrun, task_prerun
from django.db import OperationalError
from kombu import Queue

from config.db_connections import connection_reuse_install
from config.env import setting_errors_exit
from config.logging import celery_setup_logging, task_context_bind, task_context_unbind
from config.task_names import PREVIOUS_TASK_NAMES, WORKER_WAKE

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings.dev")

# Task options for work that only reads and writes the database: a lost or restarted
# connection (failover, pg_terminate_backend) is retried with backoff, not dropped.
DB_RETRY: dict[str, Any] = {
    "autoretry_for": (OperationalError,),
    "retry_backoff": True,
    "max_retries": 5,
}

STAGE_QUEUES = ("ingest", "evaluate", "dispatch", "reconcile", "scheduler", "notify", "events")


# The task attribute that holds a task's stage queue (set through ``routed_to``).
_STAGE_ATTRIBUTE = "stage_queue"


# A task's time limits unless it names its own: a batch takes milliseconds to seconds, so a
# task still running after a minute is stuck (a lock, a hung peer). The soft limit raises in
# the task (its transaction rolls back; beat's sweeps re-derive the work), the hard one kills
# a prefork child (the message is redelivered). Thread pools (dispatch, notify) enforce
# neither: their network calls carry timeouts of their own.
SOFT_TIME_LIMIT_S = 60
TIME_LIMIT_S = 90


def routed_to(
    queue: str, *, soft_time_limit: int = SOFT_TIME_LIMIT_S, time_limit: int = TIME_LIMIT_S
) -> dict[str, Any]:
    """Task options that declare a task's stage queue and time limits next to its name:
    ``@shared_task(name=..., **routed_to("ingest"))``; Celery keeps decorator options as task
    attributes, and the router below reads the stage. Not ``queue=``: Celery deprecates
    routing attributes on tasks (no effect from 6.0) in favour of ``task_routes``."""
    if queue not in STAGE_QUEUES:
        raise ValueError(f"{queue!r} is not a stage queue ({', '.join(STAGE_QUEUES)})")
    if not 0 < soft_time_limit < time_limit:
        raise ValueError(f"soft limit {soft_time_limit} s must be under the hard {time_limit} s")
    return {
        _STAGE_ATTRIBUTE: queue,
        "soft_time_limit": soft_time_limit,
        "time_limit": time_limit,
    }


# What a renamed task's previous name is registered with, so it runs exactly as the task.
_ALIAS_OPTIONS = (_STAGE_ATTRIBUTE, "soft_time_limit", "time_limit", *DB_RETRY)


def previous_name(task: Any, name: str) -> Any:
    """Register ``task``'s function under the name it had in the previous release as well,
    with the same stage, limits and retries: a message queued under the old name across an
    upgrade is still consumed. Kept for one release, then dropped."""
    options = {key: getattr(task, key) for key in _ALIAS_OPTIONS if hasattr(task, key)}
    return shared_task(name=name, **options)(task.__wrapped__)


def previous_names_register(*tasks: Any) -> None:
    """Register each task under the names ``PREVIOUS_TASK_NAMES`` gives it from earlier
    releases (``previous_name``): called once by each tasks module for its renamed tasks."""
    for task in tasks:
        for old, new in PREVIOUS_TASK_NAMES.items():
            if new == task.name:
                previous_name(task, old)


def task_stage(task: Any) -> str | None:
    """The stage queue ``task`` declares, if any."""
    stage = getattr(task, _STAGE_ATTRIBUTE, None)
    return str(stage) if stage else None


class TaskQueues(Mapping[str, str]):
    """Every registered task that declares its stage queue, by task name, read from the
    registry: no task name is repeated here (this module imports no app; the apps import
    it)."""

    def __getitem__(self, name: str) -> str:
        stage = task_stage(app.tasks.get(name))
        if stage is None:
            raise KeyError(name)
        return stage

    def __iter__(self) -> Iterator[str]:
        return iter([name for name, task in app.tasks.items() if task_stage(task)])

    def __len__(self) -> int:
        return sum(1 for _ in self)


# Every project task and its stage queue; a test checks that each registered task has one.
TASK_ROUTES = TaskQueues()


@cache
def _task_modules_import() -> None:
    """Register every app's tasks in a process that has not yet (the bridge, web, scripts),
    as a worker does at start; once per process."""
    app.loader.import_default_modules()


def route_to_stage(
    name: str, args: Any, kwargs: Any, options: dict[str, Any], task: Any = None, **_: Any
) -> dict[str, str] | None:
    """The router (``task_routes``): a task goes to the queue it declares, whether sent as
    ``apply_async``/``delay`` on the task or by name (``send_task``: the bridge's hand-offs,
    a beat loop). An explicit ``queue=`` wins; a task that declares none, or a name no app
    registers, goes to ``task_default_queue``."""
    if options.get("queue") is not None:
        return None
    if task is None and name not in app.tasks:
        _task_modules_import()
    stage = task_stage(task) if task is not None else TASK_ROUTES.get(name)
    return {"queue": stage} if stage else None


app = Celery("config")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.conf.update(
    task_queues=[Queue(name) for name in STAGE_QUEUES],
    task_default_queue="events",
    task_routes=(route_to_stage,),
    task_acks_late=True,
    task_reject_on_worker_lost=True,
    worker_prefetch_multiplier=1,
    task_ignore_result=True,
    task_serializer="json",
    accept_content=["json"],
    broker_connection_retry_on_startup=True,
    worker_hijack_root_logger=False,
)
app.autodiscover_tasks()

# Structured logs (config/logging.py): our handler, not Celery's, and the task bound per run.


@app.task(name=WORKER_WAKE, ignore_result=True, soft_time_limit=5, time_limit=10)
def worker_wake() -> None:
    """Does nothing: its message wakes an in-process worker blocked in a polling drain (the
    in-memory broker) so that it notices it should stop (``devtools.runtime``)."""


setup_logging.connect(celery_setup_logging, weak=False)
task_prerun.connect(task_context_bind, weak=False)
task_postrun.connect(task_context_unbind, weak=False)


def configure_beat_schedule() -> None:
    """Load the code-declared beat schedule. Beat runs django-celery-beat's database
    scheduler, which writes this mapping into its tables when it starts: it must say what
    ``sync_beat_schedule`` writes (whole seconds, and the expiry under ``expire_seconds``,
    the one key that scheduler reads), or every start of beat would undo the sync."""
    from config.beat import beat_schedule

    app.conf.beat_schedule = {
        name: {
            "task": entry.task,
            "schedule": float(entry.every_whole_s),
            "options": {"expire_seconds": entry.expires_whole_s},
        }
        for name, entry in beat_schedule().items()
    }


app.on_after_configure.connect(lambda sender, **_: configure_beat_schedule(), weak=False)


def _settings_load(sender: Any = None, **_: Any) -> None:
    """Load Django's settings as the app reads its configuration (the first thing a worker
    or beat does): a malformed or missing variable is its one line on stderr and exit 2, not
    a traceback from deep inside Celery."""
    from django.conf import settings

    setting_errors_exit(lambda: settings.INSTALLED_APPS)


app.on_configure.connect(_settings_load, weak=False)
connection_reuse_install()
