"""The MQTT bridge: the only MQTT subscriber. It turns device messages into Celery tasks in
batches and acknowledges each MQTT message only after the batch holding it was handed off.

Guarantees: a message is acknowledged (PUBACK) only after ``send_task`` returned for it, so a
crash, a broker restart or a Celery outage delays messages but never loses them (the broker
redelivers what was not acknowledged; the persistent session keeps what arrives while the
bridge is away). Delivery is at least once: the database dedupes, and a short-TTL cache key,
set only after a hand-off, drops most redelivered telemetry before it costs a task.

The bridge drives paho's network loop itself (``client.loop()`` on one thread): timed
flushes need the loop, a loop we own was the fast one (SPEC §11), and acknowledgements must
be sent from the loop's own thread because paho does not guard concurrent socket writes.
"""

from __future__ import annotations

import hashlib
import logging
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

import paho.mqtt.client as paho
from django.conf import settings
from django.core.cache import cache
from django.db import close_old_connections, connections
from paho.mqtt.enums import MQTTErrorCode
from structlog.contextvars import bound_contextvars

from config.env import MqttConfig
from devices.models import DeviceMessageRejectionReason as Reason
from devices.mqtt.client import MqttUnavailable, connect, new_client
from devices.mqtt.contract import (
    RPC_RESPONSE_SUBSCRIPTION,
    STATE_SUBSCRIPTION,
    TELEMETRY_SUBSCRIPTION,
    TopicKind,
    parse_topic,
)
from devices.services import DroppedMessages, InboundTelemetry, dropped_messages_record

logger = logging.getLogger("devices.mqtt.bridge")

TELEMETRY_TASK = "devices.telemetry_ingest"
DEVICE_MESSAGES_TASK = "automation.device_messages_reconcile"
SUBSCRIPTIONS = (TELEMETRY_SUBSCRIPTION, RPC_RESPONSE_SUBSCRIPTION, STATE_SUBSCRIPTION)
BRIDGED_KINDS = (TopicKind.TELEMETRY, TopicKind.RPC_RESPONSE, TopicKind.STATE)
QOS = 1
KEEPALIVE_S = 30
LOOP_MAX_WAIT_S = 0.2  # how quickly stop() is noticed when no traffic arrives
HANDOFF_FIRST_BACKOFF_S = 0.1
HANDOFF_MAX_BACKOFF_S = 5.0
RECONNECT_FIRST_BACKOFF_S = 0.5
RECONNECT_MAX_BACKOFF_S = 2.0  # back within ~2 s of the broker: replies feed ack deadlines
STOP_TIMEOUT_S = 15.0
HEARTBEAT_INTERVAL_S = 10.0
DEDUPE_KEY_PREFIX = "bridge:telemetry:"
MAX_DROP_SUMMARIES = 10_000  # pending (device, kind, reason) summaries; beyond: counted only
DROP_SAMPLE_BYTES = 1024

Handoff = Callable[[str, list[list[Any]]], None]
DropRecorder = Callable[[list[DroppedMessages]], None]


def database_drop_recorder(drops: list[DroppedMessages]) -> None:
    """Write drop summaries from the bridge's thread: a connection the database closed (or
    that failed before) is replaced first, as a long-running process must."""
    close_old_connections()
    try:
        dropped_messages_record(drops=drops)
    finally:
        close_old_connections()


def celery_handoff(task_name: str, batch: list[list[Any]]) -> None:
    """Publish one batch as one task. ``retry=False``: the bridge owns the retry, so its MQTT
    loop is serviced between attempts instead of blocking inside kombu's retry policy."""
    from config.celery import app as celery_app

    celery_app.send_task(task_name, args=[batch], retry=False)


def default_client_id() -> str:
    """Stable across restarts, so the broker hands the persistent session back to us."""
    configured: str = getattr(settings, "BRIDGE_CLIENT_ID", "")
    return configured or f"farm-bridge-{socket.gethostname().split('.')[0][:40]}"


def dedupe_key(serial: str, payload: bytes) -> str:
    digest = hashlib.sha256(serial.encode("utf-8", "surrogatepass") + b"\x00" + payload)
    return DEDUPE_KEY_PREFIX + digest.hexdigest()


def _decode(payload: bytes) -> tuple[str, bool]:
    """Text and bad_encoding, by the same rule as ``InboundTelemetry.from_bytes``."""
    try:
        return payload.decode("utf-8"), False
    except UnicodeDecodeError:
        return payload.decode("utf-8", "backslashreplace"), True


@dataclass
class BridgeStats:
    """Counters for progress lines and tests; a snapshot is a copy, safe to keep."""

    received: dict[str, int] = field(default_factory=lambda: dict.fromkeys(BRIDGED_KINDS, 0))
    handed_off: int = 0
    acked: int = 0
    duplicates_dropped: int = 0
    unknown_topic: int = 0
    oversized: int = 0
    rate_limited: int = 0
    drop_record_failures: int = 0
    handoff_failures: int = 0
    reconnects: int = 0

    def summary(self) -> str:
        kinds = " ".join(f"{kind}={count}" for kind, count in self.received.items())
        return (
            f"received[{kinds}] handed_off={self.handed_off} acked={self.acked} "
            f"duplicates={self.duplicates_dropped} unknown_topic={self.unknown_topic} "
            f"oversized={self.oversized} rate_limited={self.rate_limited} "
            f"drop_record_failures={self.drop_record_failures} "
            f"handoff_failures={self.handoff_failures} reconnects={self.reconnects}"
        )


@dataclass(slots=True)
class _Entry:
    """One received message waiting for its hand-off; ``arg`` None once it is known to be a
    duplicate (it then only needs its acknowledgement)."""

    arg: list[Any] | None
    mid: int
    qos: int
    connection: int  # acknowledge only on the connection that delivered it
    key: str | None = None
    checked: bool = False


@dataclass(slots=True)
class _Bucket:
    """A device's token bucket: ``tokens`` as of monotonic time ``at``."""

    tokens: float
    at: float


@dataclass
class _Group:
    task_name: str
    entries: list[_Entry] = field(default_factory=list)


class MqttBridge:
    """Subscribes to device telemetry, RPC responses and state reports; hands them to Celery
    in batches of ``batch_size`` or after ``flush_ms``; acknowledges after the hand-off."""

    def __init__(
        self,
        *,
        config: MqttConfig | None = None,
        client_id: str | None = None,
        batch_size: int | None = None,
        flush_ms: float | None = None,
        handoff: Handoff | None = None,
        dedupe_ttl_s: int | None = None,
        session_expiry_s: int | None = None,
        inflight_window: int | None = None,
        heartbeat: Callable[[str, bool], None] | None = None,
        device_rate_per_s: float | None = None,
        device_burst: int | None = None,
        drop_flush_s: float | None = None,
        drop_recorder: DropRecorder | None = None,
    ) -> None:
        self._config: MqttConfig = config or settings.MQTT
        self._client_id = client_id or default_client_id()
        self._batch_size = max(1, batch_size or settings.BRIDGE_BATCH_SIZE)
        self._flush_s = (settings.BRIDGE_FLUSH_MS if flush_ms is None else flush_ms) / 1000
        self._handoff = handoff or celery_handoff
        self._dedupe_ttl_s = settings.BRIDGE_DEDUPE_TTL_S if dedupe_ttl_s is None else dedupe_ttl_s
        self._session_expiry_s = session_expiry_s or settings.BRIDGE_SESSION_EXPIRY_S
        # The broker sends at most this many unacknowledged messages; waiting for more than
        # that before a flush would only wait for the timer.
        self._window = max(1, inflight_window or settings.BRIDGE_INFLIGHT_WINDOW)
        self._max_payload = settings.BRIDGE_MAX_PAYLOAD_BYTES
        # Flood bounds: one device cannot take the pipeline's capacity from the others.
        self._rate = (
            settings.BRIDGE_DEVICE_RATE_PER_S if device_rate_per_s is None else device_rate_per_s
        )
        self._burst = float(max(1, device_burst or settings.BRIDGE_DEVICE_BURST))
        self._buckets: dict[str, _Bucket] = {}
        self._drops: dict[tuple[str, str, Reason], DroppedMessages] = {}
        self._drop_flush_s = settings.BRIDGE_DROP_FLUSH_S if drop_flush_s is None else drop_flush_s
        self._drop_recorder = drop_recorder or database_drop_recorder
        self._next_drop_flush = 0.0
        self._stats = BridgeStats()
        self._groups = {
            TELEMETRY_TASK: _Group(TELEMETRY_TASK),
            DEVICE_MESSAGES_TASK: _Group(DEVICE_MESSAGES_TASK),
        }
        self._oldest_at = 0.0  # monotonic time of the oldest message waiting
        self._retry_at = 0.0
        self._retry_delay = HANDOFF_FIRST_BACKOFF_S
        self._connection = 0
        self._unacked = 0  # received on the current connection, not yet acknowledged
        self._ready = threading.Event()
        self._stop_event = threading.Event()
        self._thread: threading.Thread | None = None
        self._client: paho.Client | None = None
        self._connected_once = False
        self._loss_reason = ""
        # Sign of life for /health (the management command passes the database writer).
        self._heartbeat = heartbeat
        self._next_beat = 0.0

    @property
    def client_id(self) -> str:
        return self._client_id

    @property
    def stats(self) -> BridgeStats:
        return replace(self._stats, received=dict(self._stats.received))

    def wait_connected(self, timeout_s: float) -> bool:
        """True once connected and subscribed (a message published next is not missed)."""
        return self._ready.wait(timeout_s)

    def start(self) -> None:
        """Run the bridge on a background thread (tests, the embedded demo)."""
        if self._thread is not None and self._thread.is_alive():
            return
        self._stop_event = threading.Event()
        self._thread = threading.Thread(
            target=self._run_thread,
            args=(self._stop_event,),
            name=f"mqtt-bridge-{self._client_id}",
            daemon=True,
        )
        self._thread.start()

    def stop(self) -> None:
        """Flush and acknowledge what can be handed off, then disconnect keeping the
        persistent session, so the broker queues what is published while we are away."""
        self._stop_event.set()
        thread, self._thread = self._thread, None
        if thread is not None:
            thread.join(STOP_TIMEOUT_S)

    def _run_thread(self, stop: threading.Event) -> None:
        """``run_forever`` on our own thread, closing the database connection it opened."""
        try:
            self.run_forever(stop)
        finally:
            connections.close_all()

    def run_forever(self, stop: threading.Event | None = None) -> None:
        """Block until ``stop`` is set (or ``stop()`` is called). Raises ``MqttUnavailable``
        only when the very first connection is refused for a reason retrying cannot fix."""
        if stop is not None:
            self._stop_event = stop
        client = new_client(
            self._client_id,
            config=self._config,
            clean_start=False,
            session_expiry_s=self._session_expiry_s,
            manual_ack=True,
        )
        client.on_connect = self._on_connect
        client.on_subscribe = self._on_subscribe
        client.on_disconnect = self._on_disconnect
        client.on_message = self._on_message
        self._client = client
        try:
            if self._connect(client):
                self._serve(client)
        finally:
            self._shutdown(client)
            self._beat(connected=False, force=True)

    # --- the loop -------------------------------------------------------------------------

    def _serve(self, client: paho.Client) -> None:
        while not self._stop_event.is_set():
            rc = client.loop(timeout=self._wait_s())
            if rc != MQTTErrorCode.MQTT_ERR_SUCCESS:
                self._connection_lost(rc)
                if not self._connect(client):
                    return
                continue
            if self._flush_due():
                self._flush()
            self._maintain_limits()
            self._beat(connected=True)

    def _beat(self, *, connected: bool, force: bool = False) -> None:
        now = time.monotonic()
        if self._heartbeat is None or (now < self._next_beat and not force):
            return
        self._next_beat = now + HEARTBEAT_INTERVAL_S
        try:
            self._heartbeat(self._client_id, connected)
        except Exception as exc:  # health reporting must never stop the bridge
            logger.warning("bridge %s: heartbeat failed: %s", self._client_id, exc)

    def _wait_s(self) -> float:
        if not self._pending():
            return LOOP_MAX_WAIT_S
        due = max(self._retry_at, self._oldest_at + self._flush_s)
        return min(LOOP_MAX_WAIT_S, max(0.0, due - time.monotonic()))

    def _pending(self) -> int:
        return sum(len(group.entries) for group in self._groups.values())

    def _flush_due(self) -> bool:
        pending = self._pending()
        now = time.monotonic()
        if pending == 0 or now < self._retry_at:
            return False
        return (
            pending >= self._batch_size
            or self._unacked >= self._window
            or now >= self._oldest_at + self._flush_s
        )

    def _connect(self, client: paho.Client) -> bool:
        """Connect with capped backoff, logging each attempt; False if stopped first. While
        MQTT is down, what we already hold is still handed off (its redelivery is deduped)."""
        delay, attempt = RECONNECT_FIRST_BACKOFF_S, 0
        while not self._stop_event.is_set():
            attempt += 1
            try:
                connect(client, config=self._config, keepalive=KEEPALIVE_S, attempts=1)
            except MqttUnavailable as exc:
                transient = getattr(exc.__cause__, "transient", True)
                if not transient and not self._connected_once:
                    raise
                logger.warning(
                    "bridge %s: connect attempt %d to %s:%s failed: %s; retrying in %.1fs",
                    self._client_id,
                    attempt,
                    self._config.host,
                    self._config.port,
                    exc,
                    delay,
                    extra={
                        "bridgeClientId": self._client_id,
                        "attempt": attempt,
                        "reason": str(exc),
                        "retryInS": delay,
                    },
                )
                self._idle_while_disconnected(delay)
                delay = min(delay * 2, RECONNECT_MAX_BACKOFF_S)
                continue
            if self._connected_once:
                self._stats.reconnects += 1
                logger.warning(
                    "bridge %s reconnected after %d attempt(s)",
                    self._client_id,
                    attempt,
                    extra={"bridgeClientId": self._client_id, "attempt": attempt},
                )
            self._connected_once = True
            return True
        return False

    def _idle_while_disconnected(self, delay_s: float) -> None:
        deadline = time.monotonic() + delay_s
        while not self._stop_event.is_set():
            if self._flush_due() or (self._pending() and time.monotonic() >= self._retry_at):
                self._flush()
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return
            self._stop_event.wait(min(remaining, LOOP_MAX_WAIT_S))

    def _connection_lost(self, rc: MQTTErrorCode) -> None:
        self._ready.clear()
        self._connection += 1  # what the old connection delivered is redelivered, not acked
        self._unacked = 0
        reason = self._loss_reason or paho.error_string(rc)
        logger.warning(
            "bridge %s lost its MQTT connection: %s; %d message(s) held, reconnecting",
            self._client_id,
            reason,
            self._pending(),
            extra={"bridgeClientId": self._client_id, "reason": reason},
        )
        self._loss_reason = ""

    def _shutdown(self, client: paho.Client) -> None:
        if self._pending():
            self._flush()
        self._record_drops()
        left = self._pending()
        if left:
            logger.warning(
                "bridge %s stopping with %d message(s) not handed off; the broker redelivers them",
                self._client_id,
                left,
                extra={"bridgeClientId": self._client_id},
            )
        self._ready.clear()
        if client.is_connected():
            client.disconnect()  # no session-expiry change: the session outlives us
        self._client = None

    # --- paho callbacks (run inside client.loop() on the bridge's thread) -----------------

    def _on_connect(
        self, client: paho.Client, userdata: Any, flags: Any, reason: Any, properties: Any
    ) -> None:
        if reason.is_failure:
            return  # connect() reports it
        group = self._config.shared_group
        topics = [f"$share/{group}/{t}" if group else t for t in SUBSCRIPTIONS]
        client.subscribe([(topic, QOS) for topic in topics])

    def _on_subscribe(
        self, client: paho.Client, userdata: Any, mid: int, reasons: Any, properties: Any
    ) -> None:
        refused = [str(r) for r in reasons if r.is_failure]
        if refused:
            logger.error(
                "bridge %s: subscriptions refused by the broker: %s",
                self._client_id,
                ", ".join(refused),
                extra={"bridgeClientId": self._client_id},
            )
            return
        self._ready.set()

    def _on_disconnect(
        self, client: paho.Client, userdata: Any, flags: Any, reason: Any, properties: Any
    ) -> None:
        self._loss_reason = str(reason)

    def _on_message(self, client: paho.Client, userdata: Any, message: paho.MQTTMessage) -> None:
        if message.qos > 0:
            self._unacked += 1
        try:
            self._receive(message)
        except Exception:  # one bad message must never stop the loop
            logger.exception(
                "bridge %s could not take message mid=%s; acknowledging it",
                self._client_id,
                message.mid,
            )
            self._ack(_Entry(None, message.mid, message.qos, self._connection))

    def _receive(self, message: paho.MQTTMessage) -> None:
        received_at = datetime.now(UTC)
        try:
            topic = message.topic
        except UnicodeDecodeError:  # paho raises for a topic that is not UTF-8
            topic = "<topic not UTF-8>"
        parsed = parse_topic(topic)
        if parsed is None or parsed[1] not in BRIDGED_KINDS:
            self._stats.unknown_topic += 1
            logger.warning(
                "bridge %s: message on unknown topic %r acknowledged and dropped",
                self._client_id,
                topic[:200],
                extra={"bridgeClientId": self._client_id, "topic": topic[:200]},
            )
            self._ack(_Entry(None, message.mid, message.qos, self._connection))
            return
        serial, kind = parsed
        # Every line logged while this message is handled names its device (SPEC §9).
        with bound_contextvars(serialNumber=serial):
            self._take(serial, kind, message, received_at)

    def _take(
        self, serial: str, kind: TopicKind, message: paho.MQTTMessage, received_at: datetime
    ) -> None:
        """Queue one device message for the next batch hand-off (telemetry or device reply)."""
        payload = bytes(message.payload)
        self._stats.received[kind] += 1
        if not self._allow(serial):
            self._stats.rate_limited += 1
            detail = f"over {self._rate:g}/s (burst {self._burst:g})"
            self._drop(serial, kind, Reason.RATE_LIMITED, payload, received_at, detail)
            self._ack(_Entry(None, message.mid, message.qos, self._connection))
            return
        if len(payload) > self._max_payload:
            self._stats.oversized += 1
            logger.warning(
                "bridge: %d-byte %s payload from %s exceeds %d bytes; dropped",
                len(payload),
                kind,
                serial,
                self._max_payload,
                extra={"serialNumber": serial},
            )
            detail = f"{len(payload)} bytes > {self._max_payload}"
            self._drop(serial, kind, Reason.PAYLOAD_TOO_LARGE, payload, received_at, detail)
            self._ack(_Entry(None, message.mid, message.qos, self._connection))
            return
        if kind is TopicKind.TELEMETRY:
            arg = InboundTelemetry.from_bytes(serial, payload, received_at).as_task_arg()
            key = dedupe_key(serial, payload) if self._dedupe_ttl_s > 0 else None
            self._add(TELEMETRY_TASK, _Entry(arg, message.mid, message.qos, self._connection, key))
        else:
            text, bad_encoding = _decode(payload)
            arg = [serial, kind.value, text, received_at.isoformat(), bad_encoding]
            self._add(DEVICE_MESSAGES_TASK, _Entry(arg, message.mid, message.qos, self._connection))

    # --- flood bounds ---------------------------------------------------------------------

    def _allow(self, serial: str) -> bool:
        """Take a token from the device's bucket (refilled at the configured rate)."""
        if self._rate <= 0:
            return True
        now = time.monotonic()
        bucket = self._buckets.get(serial)
        if bucket is None:
            bucket = self._buckets[serial] = _Bucket(self._burst, now)
        bucket.tokens = min(self._burst, bucket.tokens + (now - bucket.at) * self._rate)
        bucket.at = now
        if bucket.tokens < 1.0:
            return False
        bucket.tokens -= 1.0
        return True

    def _drop(
        self,
        serial: str,
        kind: TopicKind,
        reason: Reason,
        payload: bytes,
        received_at: datetime,
        detail: str,
    ) -> None:
        """Count a dropped message into its device's summary for the next record flush."""
        key = (serial, kind.value, reason)
        drops = self._drops.get(key)
        if drops is not None:
            drops.count += 1
            drops.last_received_at = received_at
            return
        if len(self._drops) >= MAX_DROP_SUMMARIES:
            logger.warning("bridge: too many devices dropping messages; %s not recorded", serial)
            return
        sample = _decode(payload[:DROP_SAMPLE_BYTES])[0]
        self._drops[key] = DroppedMessages(
            serial, kind.value, reason, 1, received_at, received_at, sample, detail
        )

    def _maintain_limits(self) -> None:
        """Every ``drop_flush_s``: record the drop summaries and forget full buckets (a
        device that sent nothing for a while), so memory follows active devices only."""
        now = time.monotonic()
        if now < self._next_drop_flush:
            return
        self._next_drop_flush = now + self._drop_flush_s
        self._record_drops()
        if self._rate > 0:
            full = [
                serial
                for serial, b in self._buckets.items()
                if b.tokens + (now - b.at) * self._rate >= self._burst
            ]
            for serial in full:
                del self._buckets[serial]

    def _record_drops(self) -> None:
        """Write the pending summaries; a database error is logged and counted, and the
        summaries are kept for the next attempt (bounded by ``MAX_DROP_SUMMARIES``)."""
        if not self._drops:
            return
        drops = list(self._drops.values())
        try:
            self._drop_recorder(drops)
        except Exception as exc:  # the loop must outlive the database
            self._stats.drop_record_failures += 1
            logger.warning(
                "bridge %s: recording %d drop summary(ies) failed: %s; retrying",
                self._client_id,
                len(drops),
                exc,
                extra={"bridgeClientId": self._client_id, "reason": str(exc)},
            )
            return
        self._drops.clear()

    def _add(self, task_name: str, entry: _Entry) -> None:
        if not self._pending():
            self._oldest_at = time.monotonic()
        self._groups[task_name].entries.append(entry)

    # --- hand-off -------------------------------------------------------------------------

    def _flush(self) -> None:
        """Hand off every waiting message in chunks of ``batch_size``; on failure keep the
        rest, acknowledge nothing of it, and retry after a capped backoff."""
        for group in self._groups.values():
            if group.entries and not self._flush_group(group):
                self._retry_at = time.monotonic() + self._retry_delay
                self._retry_delay = min(self._retry_delay * 2, HANDOFF_MAX_BACKOFF_S)
                return
        self._retry_at, self._retry_delay = 0.0, HANDOFF_FIRST_BACKOFF_S
        self._oldest_at = 0.0

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
            del group.entries[: len(chunk)]
            self._remember(chunk)
            for entry in chunk:
                self._ack(entry)
        return True

    def _drop_duplicates(self, entries: list[_Entry]) -> None:
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

    def _remember(self, chunk: list[_Entry]) -> None:
        keys = {e.key: 1 for e in chunk if e.key is not None and e.arg is not None}
        if not keys:
            return
        try:
            cache.set_many(keys, timeout=self._dedupe_ttl_s)
        except Exception as exc:
            logger.warning("bridge dedupe cache write failed: %s", exc)

    def _ack(self, entry: _Entry) -> None:
        client = self._client
        if entry.qos == 0 or entry.connection != self._connection or client is None:
            return
        if client.ack(entry.mid, entry.qos) == MQTTErrorCode.MQTT_ERR_SUCCESS:
            self._stats.acked += 1
        self._unacked -= 1
