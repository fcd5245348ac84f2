"""The Celery app: one queue per pipeline stage, late acks, prefetch of one."""

from __future__ import annotations

import os
from typing import Any

from celery import Celery
from celery.signals import setup_logging, task_postrun, task_prerun
from django.db import OperationalError
from kombu import Queue

from config.logging import celery_setup_logging, task_context_bind, task_context_unbind

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings.dev")

# Task options for work that only reads and writes the database: a lost or restarted
# connection (failover, pg_terminate_backend) is retried with backoff, not dropped.
DB_RETRY: dict[str, Any] = {
    "autoretry_for": (OperationalError,),
    "retry_backoff": True,
    "max_retries": 5,
}

STAGE_QUEUES = ("ingest", "evaluate", "dispatch", "reconcile", "scheduler", "notify", "events")

# Every project task and its stage queue; a test checks that each registered task has one.
TASK_ROUTES: dict[str, str] = {
    "devices.telemetry_ingest": "ingest",
    "automation.endpoint_events_evaluate": "evaluate",
    "automation.endpoint_events_sweep": "evaluate",
    "automation.command_intents_dispatch": "dispatch",
    "automation.command_intents_sweep": "dispatch",
    "automation.device_messages_reconcile": "reconcile",
    "automation.command_intents_reconcile": "reconcile",
    "automation.scheduler_poll_due": "scheduler",
    "automation.scheduler_execute": "scheduler",
    "automation.scheduler_release_stale": "scheduler",
    "events.event_deliver": "events",
    "notifications.deliver": "notify",
    "notifications.sweep": "notify",
    "reminders.reconcile": "scheduler",
    "reminders.report_subscriptions_ensure": "scheduler",
    "reminders.endpoint_metrics_touched": "scheduler",
}

app = Celery("config")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.conf.update(
    task_queues=[Queue(name) for name in STAGE_QUEUES],
    task_default_queue="events",
    task_routes={name: {"queue": queue} for name, queue in TASK_ROUTES.items()},
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


@app.task(name="config.worker_wake", ignore_result=True)
def worker_wake() -> None:
    """Does nothing: its message wakes an in-process worker blocked in a polling drain (the
    in-memory broker) so that it notices it should stop (``devtools.runtime``)."""


setup_logging.connect(celery_setup_logging, weak=False)
task_prerun.connect(task_context_bind, weak=False)
task_postrun.connect(task_context_unbind, weak=False)


def configure_beat_schedule() -> None:
    """Load the code-declared beat schedule (also synced into django-celery-beat's tables)."""
    from config.beat import beat_schedule

    app.conf.beat_schedule = {
        name: {
            "task": entry.task,
            "schedule": entry.every_s,
            "options": {"expires": entry.expires_s},
        }
        for name, entry in beat_schedule().items()
    }


app.on_after_configure.connect(lambda sender, **_: configure_beat_schedule(), weak=False)
