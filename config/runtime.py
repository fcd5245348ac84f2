"""The embedded runtime: an in-process Celery worker and beat loop, so one command runs the
whole pipeline with no servers (and tests can run real tasks end to end)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

from config.beat import beat_schedule
from config.celery import STAGE_QUEUES
from config.celery import app as celery_app


@contextmanager
def in_process_worker(*, concurrency: int = 4) -> Iterator[None]:
    """A thread-pool worker consuming every stage queue of the configured broker."""
    from celery.contrib.testing.worker import start_worker

    with start_worker(
        celery_app,
        pool="threads",
        concurrency=concurrency,
        perform_ping_check=False,
        loglevel="WARNING",
        shutdown_timeout=30,
        queues=list(STAGE_QUEUES),
    ):
        yield


@contextmanager
def in_process_beat(*, tick_s: float = 0.5) -> Iterator[None]:
    """Send each code-declared beat entry on its interval from a background thread."""
    stop = threading.Event()
    schedule = beat_schedule()
    next_due = {name: 0.0 for name in schedule}

    def loop() -> None:
        while not stop.is_set():
            now = time.monotonic()
            for name, entry in schedule.items():
                if now >= next_due[name]:
                    celery_app.send_task(entry.task)
                    next_due[name] = now + entry.every_s
            stop.wait(tick_s)

    thread = threading.Thread(target=loop, name="in-process-beat", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(timeout=5)
