"""What the bench asks the Celery broker: which workers answer a ping, and how many
messages wait in each stage queue. Only reads: the bench never purges a queue."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from django.conf import settings
from kombu.exceptions import ChannelError

from config.celery import app as celery_app

PING_TIMEOUT_S = 1.0


def workers_answering(destination: Sequence[str] | None = None) -> set[str]:
    """Node names that answered a broadcast ping (all of them, or those of ``destination``)."""
    replies: list[dict[str, Any]] = (
        celery_app.control.ping(
            destination=list(destination) if destination is not None else None,
            timeout=PING_TIMEOUT_S,
        )
        or []
    )
    return {node for reply in replies for node in reply}


def broker_kind() -> str:
    url: str = settings.CELERY_BROKER_URL
    if url.startswith(("redis://", "rediss://")):
        return "redis"
    if url.startswith(("amqp://", "amqps://", "pyamqp://")):
        return "amqp"
    return url.split("://", 1)[0]


def queue_length(queue: str) -> int:
    """Messages in ``queue`` over a pooled broker connection: a virtual transport's own count
    (Redis: LLEN over the priority lists, where an empty queue has no key for a passive
    declare to find), else a passive declare (RabbitMQ's message count)."""
    conn: Any
    with celery_app.pool.acquire(block=True, timeout=1.0) as conn:
        size = getattr(conn.default_channel, "_size", None)
        if size is not None:
            return int(size(queue))
        # A passive declare of a queue no worker declared yet closes its channel: a channel
        # of its own, and no queue means nothing waits in it.
        with conn.channel() as own:
            try:
                return int(own.queue_declare(queue=queue, passive=True).message_count)
            except ChannelError:
                return 0


def queue_backlog(queues: Iterable[str]) -> dict[str, int]:
    """Messages waiting per queue (not those a worker has reserved)."""
    return {q: queue_length(q) for q in queues}
