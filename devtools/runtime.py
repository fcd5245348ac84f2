"""The embedded runtime: an in-process Celery worker and beat loop, so one command runs the
whole pipeline with no servers (and tests can run real tasks end to end)."""

from __future__ import annotations

import contextlib
import gc
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from kombu import Queue
from kombu import pools as kombu_pools

from config.beat import beat_schedule
from config.celery import app as celery_app
from config.task_names import WORKER_WAKE

# Per-run AMQP queues expire this long after their last use (no consumer, no redeclare), so an
# aborted run leaves nothing behind on a shared RabbitMQ for long.
PRIVATE_QUEUE_EXPIRES_S = 600.0


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
    # The pool's threads have ended, and their database connections (a thread's own, in
    # reference cycles) stay open until a collection finds them; collect now, so no session
    # of a stopped worker is left on the database (a test database could not be dropped).
    gc.collect()


def _wake_for_shutdown(worker: Any) -> None:
    """``start_worker`` stops its worker by setting ``should_terminate``, which the event loop
    reads only between polls, and on AMQP an idle poll lasts up to 10 s (2 s on the in-memory
    broker): set it here and wake the loop, so stopping takes milliseconds (every end-to-end
    test stops a worker)."""
    from celery.worker import state

    state.should_terminate = 0  # type: ignore[assignment]  # celery types it as None only
    hub = getattr(worker, "hub", None)
    if hub is not None:
        hub.call_soon(lambda: None)  # thread-safe: wakes the poll from this thread
    else:
        # No event loop (the in-memory broker): the worker drains with a fixed 2 s timeout
        # between checks; any message ends the drain at once.
        celery_app.send_task(WORKER_WAKE)


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


@contextmanager
def private_task_queues(run: str) -> Iterator[None]:
    """Give a run (a test session, a benchmark) its own key space on a shared broker, so
    tasks queued by another run or a deployment on the same broker are neither consumed nor
    purged by ours, and stale messages naming rows that are gone never reach our worker.

    Redis: a key prefix. RabbitMQ: every stage queue renamed ``<run>-<stage>``, keeping the
    stage name as its alias so routes, ``queue="events"`` and the worker's queue list still
    resolve (a virtual host per run would need rabbitmqctl or the management API; declaring
    queues needs nothing beyond the broker URL). The in-memory broker is private already, and
    a run inside one that is (the bench inside a test session) keeps the outer key space."""
    url = celery_app.conf.broker_url
    options = dict(celery_app.conf.broker_transport_options or {})
    queues = list(celery_app.conf.task_queues)
    redis = url.startswith(("redis://", "rediss://"))
    amqp = url.startswith(("amqp://", "amqps://", "pyamqp://"))
    if _already_private(options, queues) or not (redis or amqp):
        yield
        return
    if redis:
        celery_app.conf.broker_transport_options = {**options, "global_keyprefix": f"{run}:"}
        broker_pools_forget()
    private = [
        Queue(
            f"{run}-{queue.alias or queue.name}",
            routing_key=f"{run}-{queue.alias or queue.name}",
            alias=queue.alias or queue.name,
            expires=PRIVATE_QUEUE_EXPIRES_S,
        )
        for queue in (queues if amqp else [])
    ]
    if amqp:
        _task_queues_set(private)
    try:
        yield
    finally:
        if amqp:
            _queues_delete(private)
            _task_queues_set(queues)
        if redis:
            celery_app.conf.broker_transport_options = options
            broker_pools_forget()
            _redis_keys_delete(celery_app.conf.broker_url, f"{run}:")


def _already_private(options: dict[str, Any], queues: list[Any]) -> bool:
    """A key prefix (Redis) or renamed stage queues (RabbitMQ) of an enclosing run."""
    return bool(options.get("global_keyprefix")) or any(
        q.alias and q.alias != q.name for q in queues
    )


def broker_pools_forget() -> None:
    """Pooled connections keep the URL and transport options they were opened with: close
    every pool and empty kombu's registry of them (closing only the app's pool would leave a
    closed pool registered, and the next send would fail with "Acquire on closed pool"), so
    the next send opens a connection with the current settings."""
    kombu_pools.reset()
    # Private pools of Celery's, reset so they are rebuilt from the current settings.
    celery_app._pool = None  # type: ignore[attr-defined]
    celery_app.amqp._producer_pool = None  # type: ignore[attr-defined]


def _redis_keys_delete(url: str, prefix: str) -> None:
    """Delete a run's keys (queues with what is left in them, bindings, cache entries);
    best effort. Never FLUSHDB: other runs share the database."""
    import redis

    client = redis.Redis.from_url(url)
    try:
        keys = list(client.scan_iter(match=f"{prefix}*", count=1000))
        if keys:
            client.delete(*keys)
    except redis.RedisError:
        pass
    finally:
        client.close()


@contextmanager
def private_cache_keys(run: str) -> Iterator[None]:
    """Coordination keys (the bridge's dedupe keys, the dispatcher's correlation and
    inflight keys) under a prefix of the run's own, deleted afterwards: a bridge of another
    run on the same broker and cache hands off our devices' messages too, and its dedupe
    keys would make ours drop them as duplicates. ``override_settings`` is Django's way to
    re-read CACHES in a running process; threads started inside the block use the prefix."""
    from django.conf import settings
    from django.test.utils import override_settings

    caches = {
        name: {**conf, "KEY_PREFIX": f"{conf.get('KEY_PREFIX') or 'cache'}:{run}"}
        for name, conf in settings.CACHES.items()
    }
    with override_settings(CACHES=caches):
        try:
            yield
        finally:
            for conf in caches.values():
                if conf["BACKEND"].endswith(".RedisCache"):
                    _redis_keys_delete(conf["LOCATION"], f"{conf['KEY_PREFIX']}:")


def _task_queues_set(queues: list[Queue]) -> None:
    celery_app.conf.task_queues = queues
    for cached in ("queues", "default_queue", "router", "send_task_message"):
        celery_app.amqp.__dict__.pop(cached, None)  # built from the old list if already used


def _queues_delete(queues: list[Queue]) -> None:
    """Delete a run's queues now rather than after x-expires; best effort."""
    with celery_app.connection_for_write() as conn:
        errors = (*conn.connection_errors, *conn.channel_errors)
        with contextlib.suppress(*errors):
            for queue in queues:
                queue.bind(conn.default_channel).delete()
