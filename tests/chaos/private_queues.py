"""A stack process on a shared RabbitMQ with stage queues of its own.

``python -m tests.chaos.private_queues celery -A config worker …`` (or ``… manage.py
mqtt_bridge …``) renames every stage queue ``<run>-<stage>`` before the program starts, as
``devtools.runtime.private_task_queues`` does for a test session: the stage name stays the
queue's alias, so routes, ``queue="events"`` and ``-Q ingest`` still resolve, and a chaos
scenario may delete its queues without touching anything another run declared on the broker.
The run comes from ``EDGE_QUEUE_RUN``; without it the program runs unchanged."""

from __future__ import annotations

import os
import runpy
import sys
from pathlib import Path

from kombu import Queue

from config.celery import STAGE_QUEUES
from config.celery import app as celery_app

ROOT = Path(__file__).resolve().parents[2]
RUN_VARIABLE = "EDGE_QUEUE_RUN"
# An aborted run's queues expire on their own this long after their last use.
QUEUE_EXPIRES_S = 600.0


def private_queues(run: str) -> list[Queue]:
    """The stage queues of ``run``, declared alike by every process (and deleted by the test
    with the same arguments, or RabbitMQ refuses the declaration as a different queue)."""
    return [
        Queue(f"{run}-{stage}", routing_key=f"{run}-{stage}", alias=stage, expires=QUEUE_EXPIRES_S)
        for stage in STAGE_QUEUES
    ]


def private_queues_use(run: str) -> None:
    """This process sends to and consumes from ``run``'s queues only. Remote control is off:
    its pidbox queue would be named after the worker's node name, which other runs share."""
    celery_app.conf.task_queues = private_queues(run)
    celery_app.conf.worker_enable_remote_control = False
    for cached in ("queues", "default_queue", "router", "send_task_message"):
        celery_app.amqp.__dict__.pop(cached, None)  # built from the old list if already used


def main(argv: list[str]) -> None:
    """Run ``celery …`` or ``manage.py …`` (``argv``) on the private queues of the run."""
    run = os.environ.get(RUN_VARIABLE)
    if run:
        private_queues_use(run)
    program, *args = argv
    if program == "celery":
        from celery.bin.celery import main as celery_main

        sys.argv = ["celery", *args]
        sys.exit(celery_main())
    sys.argv = [program, *args]
    runpy.run_path(str(ROOT / program), run_name="__main__")


if __name__ == "__main__":
    main(sys.argv[1:])
