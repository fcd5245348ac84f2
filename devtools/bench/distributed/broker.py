"""What the bench asks the Celery broker: which workers answer a ping, and how many
messages wait in each stage queue. Only reads: the bench never purges a queue."""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Sequence
from typing import Any

import redis
from django.conf import settings

from config.celery import app as celery_app

PING_TIMEOUT_S = 1.0
# kombu's Redis transport keeps a queue's prioritised messages in sibling lists named
# <queue><separator><priority>; priority 0 is the queue's own name.
REDIS_PRIORITY_SEPARATOR = "\x06\x16"
REDIS_PRIORITY_STEPS = (3, 6, 9)


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


def queue_backlog(queues: Iterable[str]) -> dict[str, int]:
    """Messages waiting per queue (not those a worker has reserved): Redis ``LLEN``,
    RabbitMQ a passive ``queue_declare``; empty for another transport."""
    names = list(queues)
    kind = broker_kind()
    if kind == "redis":
        client = redis.Redis.from_url(settings.CELERY_BROKER_URL)
        try:
            return {q: _redis_length(client, q) for q in names}
        finally:
            client.close()
    if kind == "amqp":
        out: dict[str, int] = {}
        with celery_app.connection_for_read() as conn:
            channel: Any = conn.default_channel  # an AMQP channel here
            for q in names:
                with contextlib.suppress(Exception):  # a queue nobody declared yet
                    out[q] = int(channel.queue_declare(queue=q, passive=True).message_count)
        return out
    return {}


def _redis_length(client: redis.Redis, queue: str) -> int:
    keys = [queue] + [f"{queue}{REDIS_PRIORITY_SEPARATOR}{p}" for p in REDIS_PRIORITY_STEPS]
    return sum(int(client.llen(k)) for k in keys)
