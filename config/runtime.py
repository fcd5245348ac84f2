"""The embedded runtime: an in-process Celery worker and beat loop, so one command runs the
whole pipeline with no servers (and tests can run real tasks end to end)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from config.beat import beat_schedule
from config.celery import app as celery_app


@contextmanager
def in_process_worker(*, concurrency: int = 4) -> Iterator[None]:
    """A thread-pool worker consuming every stage queue of the configured broker: the queues
    the app is configured with, not fixed names, since tests rename them per run."""
    from celery.contrib.testing.worker import start_worker

    worker_ref: list[Any] = []
    try:
        with start_worker(
            celery_app,
            pool="threads",
            concurrency=concurrency,
            perform_ping_check=False,
            loglevel="WARNING",
            shutdown_timeout=30,
            queues=[queue.name for queue in celery_app.conf.task_queues],
        ) as worker:
            worker_ref.append(worker)
            try:
                yield
            finally:
                _wake_for_shutdown(worker)
    finally:
        for worker in worker_ref:
            _drain(worker)


def _drain(worker: Any) -> None:
    """The test worker stops cold, and the thread pool's cold stop does not wait for tasks
    already running: wait for them here, so nothing still holds database locks (or writes)
    once the block has exited."""
    executor = getattr(getattr(worker, "pool", None), "executor", None)
    if executor is not None:
        executor.shutdown(wait=True, cancel_futures=True)


def _wake_for_shutdown(worker: Any) -> None:
    """``start_worker`` stops its worker by setting ``should_terminate``, which the event loop
    reads only between polls, and on AMQP an idle poll lasts up to 10 s: set it here and wake
    the loop, so stopping takes milliseconds (every end-to-end test stops a worker)."""
    from celery.worker import state

    state.should_terminate = 0
    hub = getattr(worker, "hub", None)
    if hub is not None:
        hub.call_soon(lambda: None)  # thread-safe: wakes the poll from this thread


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
