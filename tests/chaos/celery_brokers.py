"""The Celery broker of a chaos scenario, and what "restarted empty" means on each: the
private Redis SIGKILLed and started again with nothing loaded (it runs with ``--save ""
--appendonly no``), or, on the shared RabbitMQ, the stack's own stage queues deleted with
whatever they held. Processes on RabbitMQ run through ``tests.chaos.private_queues`` so that
deleting those queues touches nothing another run declared."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from config.celery import STAGE_QUEUES
from tests.chaos.harness import BIN, PORT_WAIT_S, Servers, port_open
from tests.chaos.private_queues import RUN_VARIABLE, private_queues
from tests.waiting import wait_for

RABBITMQ_URL = os.environ.get("CHAOS_RABBITMQ_URL", "amqp://guest:guest@127.0.0.1:5672//")
RABBITMQ_CONNECT_S = 3.0


class BrokerKind(StrEnum):
    REDIS = "redis"
    RABBITMQ = "rabbitmq"


@dataclass
class EdgeServers(Servers):
    """The harness's private Redis (coordination cache, and the Celery broker when the
    scenario runs on Redis) and Mosquitto, with the scenario's Celery broker URL."""

    celery_url: str = ""

    @property
    def broker_url(self) -> str:
        return self.celery_url or f"redis://127.0.0.1:{self.redis_port}/1"


@dataclass(frozen=True)
class BrokerRestart:
    """What an empty restart dropped, for the scenario's story."""

    dropped: str


def rabbitmq_unreachable() -> str | None:
    """Why RabbitMQ cannot be used here, or None."""
    from kombu import Connection

    try:
        with Connection(RABBITMQ_URL, connect_timeout=RABBITMQ_CONNECT_S) as conn:
            conn.ensure_connection(max_retries=1)
    except Exception as exc:  # any refusal is a reason to skip, and the reason is printed
        return f"RabbitMQ at {RABBITMQ_URL} is unreachable ({exc!r}); CI starts it (.ci/run)"
    return None


@dataclass
class CeleryBroker:
    """The scenario's Celery broker: the URL its processes get, how they are launched, and
    its empty restart."""

    kind: BrokerKind
    run: str = field(default_factory=lambda: f"edge-{uuid.uuid4().hex[:8]}")

    def url(self, servers: Servers) -> str:
        if self.kind is BrokerKind.RABBITMQ:
            return RABBITMQ_URL
        return f"redis://127.0.0.1:{servers.redis_port}/1"

    def env(self) -> dict[str, str]:
        return {RUN_VARIABLE: self.run} if self.kind is BrokerKind.RABBITMQ else {}

    def launched(self, argv: Sequence[str]) -> list[str]:
        """``argv`` of a Celery-using process (worker, beat, bridge), on private queues when
        the broker is shared."""
        if self.kind is not BrokerKind.RABBITMQ:
            return list(argv)
        program = "celery" if argv[0] == str(BIN / "celery") else argv[1]
        rest = argv[1:] if program == "celery" else argv[2:]
        return [str(BIN / "python"), "-m", "tests.chaos.private_queues", program, *rest]

    def restart_empty(self, servers: Servers) -> BrokerRestart:
        if self.kind is BrokerKind.RABBITMQ:
            return self._queues_delete()
        return _redis_restart_empty(servers)

    def _queues_delete(self) -> BrokerRestart:
        from kombu import Connection

        dropped: dict[str, int] = {}
        with Connection(RABBITMQ_URL, connect_timeout=RABBITMQ_CONNECT_S) as conn:
            channel: Any = conn.channel()  # py-amqp's: queue_delete answers a message count
            for stage, queue in zip(STAGE_QUEUES, private_queues(self.run), strict=True):
                dropped[stage] = int(channel.queue_delete(queue.name) or 0)
            channel.close()
        shown = ", ".join(f"{stage} {n}" for stage, n in dropped.items() if n) or "none"
        return BrokerRestart(f"RabbitMQ queues deleted; messages dropped: {shown}")

    def cleanup(self) -> None:
        if self.kind is BrokerKind.RABBITMQ:
            self._queues_delete()

    @contextmanager
    def producer(self, servers: Servers) -> Iterator[None]:
        """This process's Celery app sends to the stack's broker and queues meanwhile (the
        rules and farms the test writes may enqueue work)."""
        from config.celery import app as celery_app
        from devtools.runtime import broker_pools_forget
        from tests.chaos.private_queues import private_queues_use

        conf: Any = celery_app.conf  # its stubs type broker_url read-only
        saved = conf.broker_url, conf.broker_transport_options, list(conf.task_queues)
        broker_pools_forget()
        conf.broker_url, conf.broker_transport_options = self.url(servers), {}
        if self.kind is BrokerKind.RABBITMQ:
            private_queues_use(self.run)
        try:
            yield
        finally:
            broker_pools_forget()
            conf.broker_url, conf.broker_transport_options, conf.task_queues = saved
            for cached in ("queues", "default_queue", "router", "send_task_message"):
                celery_app.amqp.__dict__.pop(cached, None)


def _redis_restart_empty(servers: Servers) -> BrokerRestart:
    """SIGKILL the private Redis and start it again on its port; it must come back with
    nothing loaded (no dump file read), or the restart would not be the loss it stages."""
    import redis

    assert servers.redis is not None
    client = redis.Redis(host="127.0.0.1", port=servers.redis_port)
    before = sum(int(db.get("keys", 0)) for db in _keyspace(client).values())
    servers.redis.kill()
    servers.redis.start()
    wait_for(lambda: port_open(servers.redis_port), "redis-server back up", PORT_WAIT_S)
    loaded = int(client.info("persistence").get("rdb_last_load_keys_loaded", 0))
    assert loaded == 0, f"the restarted Redis loaded {loaded} keys from a dump file"
    client.close()
    return BrokerRestart(f"Redis SIGKILLed with {before} keys, back empty")


def _keyspace(client: Any) -> dict[str, dict[str, int]]:
    info = client.info("keyspace")
    return {name: value for name, value in info.items() if isinstance(value, dict)}
