"""What the bench asks the Celery broker: which workers answer a ping, and how many
messages wait in each stage queue. Only reads: the bench never purges a queue."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from django.conf import settings

from config.celery import app as celery_app
from devices.mqtt.bridge.batcher import queue_length

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


def queue_backlog(queues: Iterable[str]) -> dict[str, int]:
    """Messages waiting per queue (not those a worker has reserved), read as the bridge reads
    them when it decides to hold a batch."""
    return {q: queue_length(q) for q in queues}
