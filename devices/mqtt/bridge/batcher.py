"""The bridge's hand-offs: received messages wait in one group per task and go to Celery in
chunks of ``batch_size``; each message is acknowledged only after the chunk holding it was
handed off, and a failed hand-off is retried with a capped backoff, acknowledging nothing.

Batches form from what is waiting: while the task's queue already holds batches no worker
has taken (every worker is busy), new messages wait here instead of becoming more small
tasks behind them, so the next batch is larger and costs the same statements."""

from __future__ import annotations

import hashlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from django.core.cache import cache
from kombu.exceptions import ChannelError

from devices.mqtt.bridge.stats import BridgeStats
from devices.mqtt.contract import TopicKind
from devices.mqtt.messages import DEVICE_MESSAGES_TASK, TELEMETRY_TASK, WireRow

logger = logging.getLogger("devices.mqtt.bridge")

HANDOFF_FIRST_BACKOFF_S = 0.1
HANDOFF_MAX_BACKOFF_S = 5.0
DEDUPE_KEY_PREFIX = "bridge:telemetry:"

# While workers are busy, how often the queue is looked at again, and the longest a message
# is held for a larger batch (it then goes out whatever the queue holds).
BACKLOG_CHECK_S = 0.005
HOLD_MAX_S = 0.5

Handoff = Callable[[str, list[WireRow]], None]
Backlog = Callable[[str], int]  # task name -> hand-offs waiting in its queue, untaken


def celery_backlog(task_name: str) -> int:
    """Hand-offs waiting in the queue ``task_name`` is routed to, untaken by any worker."""
    from config.celery import app as celery_app
    from config.celery import route_to_stage

    route = route_to_stage(task_name, (), {}, {}) or {}
    return queue_length(route.get("queue", celery_app.conf.task_default_queue))


def queue_length(queue: str) -> int:
    """Messages in ``queue`` over a pooled broker connection: a virtual transport's own count
    (Redis: LLEN over the priority lists, where an empty queue has no key for a passive
    declare to find), else a passive declare (RabbitMQ's message count)."""
    from config.celery import app as celery_app

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


def celery_handoff(task_name: str, batch: list[WireRow]) -> None:
    """Publish one batch as one task, by name (the tasks sit in an app above this one), to
    the queue the task declares (the app's router reads it). ``retry=False``: the bridge owns
    the retry, so its MQTT loop is serviced between attempts instead of blocking inside
    kombu's retry policy."""
    from config.celery import app as celery_app

    celery_app.send_task(task_name, args=[batch], retry=False)


def dedupe_key(serial: str, payload: bytes) -> str:
    digest = hashlib.sha256(serial.encode("utf-8", "surrogatepass") + b"\x00" + payload)
    return DEDUPE_KEY_PREFIX + digest.hexdigest()


@dataclass(slots=True)
class Entry:
    """One received message waiting for its hand-off; ``arg`` None once it is known to be a
    duplicate (it then only needs its acknowledgement)."""

    arg: WireRow | None
    mid: int
    qos: int
    connection: int  # acknowledge only on the connection that delivered it
    key: str | None = None
    checked: bool = False


@dataclass
class _Group:
    task_name: str
    entries: list[Entry] = field(default_factory=list)


class Batcher:
    """The messages waiting for a hand-off, and when the next one is due."""

    def __init__(
        self,
        *,
        client_id: str,
        stats: BridgeStats,
        batch_size: int,
        flush_s: float,
        window: int,
        handoff: Handoff | None,
        dedupe_ttl_s: int,
        ack: Callable[[Entry], None],
        backlog: Backlog | None = None,
        hold_s: float = HOLD_MAX_S,
        reply_wait_s: float = 0.0,
    ) -> None:
        """``handoff`` None is Celery's; only then is ``backlog`` by default Celery's queues
        (another hand-off has no queue to look at)."""
        self._client_id = client_id
        self._stats = stats
        self._batch_size = batch_size
        self._flush_s = flush_s
        self._window = window
        self._handoff = handoff or celery_handoff
        self._dedupe_ttl_s = dedupe_ttl_s
        self._ack = ack
        self._groups = {
            TELEMETRY_TASK: _Group(TELEMETRY_TASK),
            DEVICE_MESSAGES_TASK: _Group(DEVICE_MESSAGES_TASK),
        }
        self._oldest_at = 0.0  # monotonic time of the oldest message waiting
        self._flushed_at = time.monotonic()  # of the last complete flush (or the start)
        self._retry_at = 0.0
        self._retry_delay = HANDOFF_FIRST_BACKOFF_S
        self._backlog = backlog if backlog is not None or handoff else celery_backlog
        self._hold_s = hold_s
        self._held_until = 0.0  # while holding, the queue is not looked at before this
        # A device's ack is followed by its state report within milliseconds: on a quiet
        # bridge an ack waits up to ``reply_wait_s`` for it, so both cross in one reconcile
        # batch (one task, one transaction) instead of two. Serial → when its ack arrived.
        self._reply_wait_s = reply_wait_s
        self._acks_waiting: dict[str, float] = {}

    @property
    def dedupes(self) -> bool:
        """Whether telemetry carries a dedupe key (a TTL of 0 turns the fast path off)."""
        return self._dedupe_ttl_s > 0

    def add(self, task_name: str, entry: Entry, *, reply: tuple[str, str] | None = None) -> None:
        """``reply`` is a device message's (serial, kind): an ack waits for its state."""
        now = time.monotonic()
        if not self.pending():
            self._oldest_at = now
        self._groups[task_name].entries.append(entry)
        if reply is not None and self._reply_wait_s > 0:
            serial, kind = reply
            if kind == TopicKind.RPC_RESPONSE:
                self._acks_waiting[serial] = now
            else:
                self._acks_waiting.pop(serial, None)

    def _reply_due_at(self) -> float:
        """When the last ack still waiting for its device's state report stops waiting."""
        return max(self._acks_waiting.values(), default=0.0) + self._reply_wait_s

    def pending(self) -> int:
        return sum(len(group.entries) for group in self._groups.values())

    def wait_s(self, max_wait_s: float) -> float:
        """How long the loop may wait for traffic before the next flush is due; on a quiet
        bridge not at all (it only looks whether more messages are ready, see ``flush_due``)."""
        if not self.pending():
            return max_wait_s
        now = time.monotonic()
        due = self._oldest_at + self._flush_s
        if now - self._flushed_at >= self._flush_s:
            due = now
        due = max(due, min(self._held_until, self._oldest_at + self._hold_s))
        if self._acks_waiting:
            due = max(due, self._reply_due_at())
        return min(max_wait_s, max(0.0, max(self._retry_at, due) - now))

    def flush_due(self, unacked: int, arrived: int = 1) -> bool:
        """What waits goes out: on a quiet bridge (no flush within ``flush_s``) as soon as the
        socket has nothing more ready (``arrived`` 0 in the last loop pass), so no window adds
        latency; on a busy one with a full batch, a full inflight window (``unacked``
        messages on this connection: the broker sends no more until some are acknowledged)
        or the timer, so batches grow with the load. Not before a retry's backoff ends, and
        not while the queue still holds untaken batches (up to ``hold_s``, see ``_held``)."""
        pending = self.pending()
        now = time.monotonic()
        if pending == 0 or now < self._retry_at:
            return False
        if pending >= self._batch_size or unacked >= self._window:
            return True
        timely = (arrived == 0 and now - self._flushed_at >= self._flush_s) or (
            now >= self._oldest_at + self._flush_s
        )
        if self._acks_waiting and now < self._reply_due_at():
            return False
        return timely and not self._held(now)

    def _held(self, now: float) -> bool:
        """Whether the waiting messages stay for a larger batch: some queue they go to still
        holds a batch no worker has taken, and the oldest has waited less than ``hold_s``.
        An unanswered look at the queue holds nothing (the hand-off decides then)."""
        if self._backlog is None or now >= self._oldest_at + self._hold_s:
            return False
        if now < self._held_until:
            return True
        try:
            busy = any(self._backlog(g.task_name) > 0 for g in self._groups.values() if g.entries)
        except Exception as exc:
            logger.debug("bridge %s: queue backlog unknown: %s", self._client_id, exc)
            busy = False
        if busy:
            self._stats.holds += 1
            self._held_until = now + BACKLOG_CHECK_S
        return busy

    def retry_due(self) -> bool:
        return bool(self.pending()) and time.monotonic() >= self._retry_at

    def flush(self) -> None:
        """Hand off every waiting message in chunks of ``batch_size``; on failure keep the
        rest, acknowledge nothing of it, and retry after a capped backoff."""
        for group in self._groups.values():
            if group.entries and not self._flush_group(group):
                self._retry_at = time.monotonic() + self._retry_delay
                self._retry_delay = min(self._retry_delay * 2, HANDOFF_MAX_BACKOFF_S)
                return
        self._retry_at, self._retry_delay = 0.0, HANDOFF_FIRST_BACKOFF_S
        self._oldest_at = self._held_until = 0.0
        self._acks_waiting.clear()
        self._flushed_at = time.monotonic()

    def _flush_group(self, group: _Group) -> bool:
        if group.task_name == TELEMETRY_TASK and self._dedupe_ttl_s > 0:
            self._drop_duplicates(group.entries)
        while group.entries:
            chunk = group.entries[: self._batch_size]
            batch = [entry.arg for entry in chunk if entry.arg is not None]
            if batch:
                try:
                    self._handoff(group.task_name, batch)
                except Exception as exc:  # broker down, timeout, serialisation: keep, retry
                    self._stats.handoff_failures += 1
                    logger.warning(
                        "bridge %s: hand-off of %d message(s) to %s failed: %s; retrying in "
                        "%.1fs, not acknowledged",
                        self._client_id,
                        len(batch),
                        group.task_name,
                        exc,
                        self._retry_delay,
                        extra={
                            "bridgeClientId": self._client_id,
                            "task": group.task_name,
                            "reason": str(exc),
                            "retryInS": self._retry_delay,
                        },
                    )
                    return False
                self._stats.handed_off += len(batch)
                self._stats.handoffs += 1
            del group.entries[: len(chunk)]
            self._remember(chunk)
            for entry in chunk:
                self._ack(entry)
        return True

    def _drop_duplicates(self, entries: list[Entry]) -> None:
        """Mark telemetry already handed off (by any bridge, within the TTL) or repeated in
        this batch; a cache error only means nothing is dropped."""
        fresh = [e for e in entries if not e.checked and e.key is not None]
        if not fresh:
            return
        try:
            known = cache.get_many([e.key for e in fresh if e.key is not None])
        except Exception as exc:  # the cache is a fast path; the database dedupes anyway
            logger.warning("bridge dedupe cache read failed: %s", exc)
            known = {}
        seen = {e.key for e in entries if e.checked and e.arg is not None}
        for entry in fresh:
            entry.checked = True
            if entry.key in known or entry.key in seen:
                entry.arg = None
                self._stats.duplicates_dropped += 1
            else:
                seen.add(entry.key)

    def _remember(self, chunk: list[Entry]) -> None:
        keys = {e.key: 1 for e in chunk if e.key is not None and e.arg is not None}
        if not keys:
            return
        try:
            cache.set_many(keys, timeout=self._dedupe_ttl_s)
        except Exception as exc:
            logger.warning("bridge dedupe cache write failed: %s", exc)
