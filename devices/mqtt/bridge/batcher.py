"""The bridge's store: received messages wait in one group per kind (telemetry, device
replies) and are committed to the database in chunks of ``batch_size`` by the store the
settings name (``BRIDGE_STORE``); each message is acknowledged to the MQTT broker only after
the chunk holding it was committed, and a failed commit is retried with a capped backoff,
acknowledging nothing (the broker keeps what is not acknowledged, within its queue limit).

Batches form from what is waiting: while a commit runs, the socket fills, and the next
batch is larger for the same statements."""

from __future__ import annotations

import hashlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from django.conf import settings
from django.core.cache import cache
from django.utils.module_loading import import_string

from config.task_names import DEVICE_MESSAGES_RECONCILE, TELEMETRY_INGEST
from devices.mqtt.bridge.stats import BridgeStats
from devices.mqtt.contract import TopicKind
from devices.mqtt.messages import WireRow

logger = logging.getLogger("devices.mqtt.bridge")

STORE_FIRST_BACKOFF_S = 0.1
STORE_MAX_BACKOFF_S = 5.0
DEDUPE_KEY_PREFIX = "bridge:telemetry:"

# The store commits one batch of one group (``TELEMETRY_INGEST`` or ``DEVICE_MESSAGES_RECONCILE``,
# the names the payload rows are shaped for) and returns after the commit, or raises.
Handoff = Callable[[str, list[WireRow]], None]


def configured_store() -> Handoff:
    """The store the settings name: it lives in an app above this one (ingest and receipts
    are automation's), so the bridge reaches it by name, as a worker reaches a task."""
    store: Handoff = import_string(settings.BRIDGE_STORE)
    return store


def configured_flush_end() -> Callable[[], None]:
    """What the store does once a flush's groups were committed (``BRIDGE_FLUSH_END``): the
    hand-offs the groups share go out once per flush, not once per group."""
    flush_end: Callable[[], None] = import_string(settings.BRIDGE_FLUSH_END)
    return flush_end


def dedupe_key(serial: str, payload: bytes) -> str:
    digest = hashlib.sha256(serial.encode("utf-8", "surrogatepass") + b"\x00" + payload)
    return DEDUPE_KEY_PREFIX + digest.hexdigest()


@dataclass(slots=True)
class Entry:
    """One received message waiting for its commit; ``arg`` None once it is known to be a
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
    """The messages waiting for a commit, and when the next one is due."""

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
        reply_wait_s: float = 0.0,
        flush_end: Callable[[], None] | None = None,
    ) -> None:
        """``handoff`` None is the configured store and its flush end (tests pass a
        recorder, and a flush end of their own or none)."""
        self._client_id = client_id
        self._stats = stats
        self._batch_size = batch_size
        self._flush_s = flush_s
        self._window = window
        self._handoff = handoff or configured_store()
        self._flush_end = flush_end if handoff is not None else configured_flush_end()
        self._dedupe_ttl_s = dedupe_ttl_s
        self._ack = ack
        self._groups = {
            TELEMETRY_INGEST: _Group(TELEMETRY_INGEST),
            DEVICE_MESSAGES_RECONCILE: _Group(DEVICE_MESSAGES_RECONCILE),
        }
        self._oldest_at = 0.0  # monotonic time of the oldest message waiting
        self._flushed_at = time.monotonic()  # of the last complete flush (or the start)
        self._retry_at = 0.0
        self._retry_delay = STORE_FIRST_BACKOFF_S
        self._failing_since: float | None = None  # monotonic, while commits keep failing
        # A device's ack is followed by its state report within milliseconds: on a quiet
        # bridge an ack waits up to ``reply_wait_s`` for it, so both cross in one commit and
        # one reconcile batch instead of two. Serial → when its ack arrived.
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
        if self._acks_waiting:
            due = max(due, self._reply_due_at())
        return min(max_wait_s, max(0.0, max(self._retry_at, due) - now))

    def flush_due(self, unacked: int, arrived: int = 1) -> bool:
        """What waits goes out: on a quiet bridge (no flush within ``flush_s``) as soon as the
        socket has nothing more ready (``arrived`` 0 in the last loop pass), so no window adds
        latency; on a busy one with a full batch, a full inflight window (``unacked``
        messages on this connection: the broker sends no more until some are acknowledged)
        or the timer, so batches grow with the load. Not before a retry's backoff ends."""
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
        return timely

    def retry_due(self) -> bool:
        return bool(self.pending()) and time.monotonic() >= self._retry_at

    def flush(self) -> None:
        """Commit every waiting message in chunks of ``batch_size``; on failure keep the
        rest, acknowledge nothing of it, and retry after a capped backoff. What the committed
        chunks hand on goes out at the end, whether or not every group was committed."""
        try:
            self._flush_groups()
        finally:
            if self._flush_end is not None:
                self._flush_end()

    def _flush_groups(self) -> None:
        for group in self._groups.values():
            if group.entries and not self._flush_group(group):
                now = time.monotonic()
                self._retry_at = now + self._retry_delay
                self._retry_delay = min(self._retry_delay * 2, STORE_MAX_BACKOFF_S)
                if self._failing_since is None:
                    self._failing_since = now
                return
        if self._failing_since is not None:
            logger.warning(
                "bridge %s: commits succeed again after %.1fs",
                self._client_id,
                time.monotonic() - self._failing_since,
                extra={"bridgeClientId": self._client_id},
            )
        self._retry_at, self._retry_delay = 0.0, STORE_FIRST_BACKOFF_S
        self._failing_since = None
        self._oldest_at = 0.0
        self._acks_waiting.clear()
        self._flushed_at = time.monotonic()

    def _flush_group(self, group: _Group) -> bool:
        if group.task_name == TELEMETRY_INGEST and self._dedupe_ttl_s > 0:
            self._drop_duplicates(group.entries)
        while group.entries:
            chunk = group.entries[: self._batch_size]
            batch = [entry.arg for entry in chunk if entry.arg is not None]
            if batch:
                try:
                    self._handoff(group.task_name, batch)
                except Exception as exc:  # database unreachable, a timeout: keep, retry
                    self._stats.store_failures += 1
                    logger.warning(
                        "bridge %s: commit of %d message(s) (%s) failed: %s; retrying in "
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
                self._stats.stored += len(batch)
                self._stats.commits += 1
            del group.entries[: len(chunk)]
            self._remember(chunk)
            for entry in chunk:
                self._ack(entry)
        return True

    def _drop_duplicates(self, entries: list[Entry]) -> None:
        """Mark telemetry already committed (by any bridge, within the TTL) or repeated in
        this batch; a cache error only means nothing is dropped (the unique keys absorb it)."""
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
