"""The MQTT bridge: the only MQTT subscriber. It commits device messages to the database in
batches and acknowledges each one (PUBACK) only after the batch holding it was committed:
telemetry with its endpoint events, a reply as a receipt, a refused message as a rejection.

So a bridge crash, a worker outage or a Celery broker restarted empty loses nothing: the
broker redelivers what was not acknowledged, the persistent session keeps what arrives while
the bridge is away, and Celery then carries ids only, which the sweeps re-derive from SQL.
While the database is unreachable nothing is acknowledged and commits are retried with a
capped backoff. Unique keys absorb a redelivery; a short-TTL cache key, set after a commit,
drops most redelivered telemetry before it costs a statement.

The bridge drives paho's network loop itself (``client.loop()`` on one thread): timed flushes
need the loop, a loop we own was the fast one (docs/spec.md §11), and acknowledgements must be
sent from the loop's own thread because paho does not guard concurrent socket writes.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import paho.mqtt.client as paho
from django.conf import settings
from django.db import connections
from paho.mqtt.enums import MQTTErrorCode
from paho.mqtt.reasoncodes import ReasonCode
from structlog.contextvars import bound_contextvars

from config.env import MqttConfig
from devices.mqtt.bridge.batcher import (
    DEVICE_MESSAGES_RECONCILE,
    TELEMETRY_INGEST,
    Batcher,
    Entry,
    Handoff,
    dedupe_key,
)
from devices.mqtt.bridge.limits import DeviceLimits, DropRecorder, database_drop_recorder
from devices.mqtt.bridge.session import BridgeSession, default_client_id, session_end
from devices.mqtt.bridge.stats import BRIDGED_KINDS, BridgeStats
from devices.mqtt.client import MqttUnavailable, connect, new_client
from devices.mqtt.contract import (
    RPC_RESPONSE_SUBSCRIPTION,
    STATE_SUBSCRIPTION,
    TELEMETRY_SUBSCRIPTION,
    TopicKind,
    parse_topic,
)
from devices.mqtt.messages import DeviceMessage, InboundTelemetry

logger = logging.getLogger("devices.mqtt.bridge")

SUBSCRIPTIONS = (TELEMETRY_SUBSCRIPTION, RPC_RESPONSE_SUBSCRIPTION, STATE_SUBSCRIPTION)
QOS = 1
KEEPALIVE_S = 30
LOOP_MAX_WAIT_S = 0.2  # how quickly stop() is noticed when no traffic arrives
RECONNECT_FIRST_BACKOFF_S = 0.5
RECONNECT_MAX_BACKOFF_S = 2.0  # back within ~2 s of the broker: replies feed ack deadlines
STOP_TIMEOUT_S = 15.0
HEARTBEAT_INTERVAL_S = 10.0


class MqttBridge:
    """Subscribes to device telemetry, RPC responses and state reports; commits them in
    batches of ``batch_size`` or after ``flush_ms``; acknowledges after the commit."""

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
        takeover_max: int | None = None,
        retire: bool = False,
    ) -> None:
        self._config: MqttConfig = config or settings.MQTT
        self._client_id = client_id or default_client_id()
        self._session_expiry_s = session_expiry_s or settings.BRIDGE_SESSION_EXPIRY_S
        self._stats = BridgeStats()
        self._batcher = Batcher(
            client_id=self._client_id,
            stats=self._stats,
            batch_size=max(1, batch_size or settings.BRIDGE_BATCH_SIZE),
            flush_s=(settings.BRIDGE_FLUSH_MS if flush_ms is None else flush_ms) / 1000,
            window=max(1, inflight_window or settings.BRIDGE_INFLIGHT_WINDOW),
            handoff=handoff,
            dedupe_ttl_s=settings.BRIDGE_DEDUPE_TTL_S if dedupe_ttl_s is None else dedupe_ttl_s,
            ack=self._ack,
            reply_wait_s=settings.BRIDGE_REPLY_WAIT_MS / 1000,
        )
        # Flood bounds: one device cannot take the pipeline's capacity from the others.
        self._limits = DeviceLimits(
            client_id=self._client_id,
            stats=self._stats,
            max_payload=settings.BRIDGE_MAX_PAYLOAD_BYTES,
            rate=device_rate_per_s,  # None: BRIDGE_DEVICE_RATE_PER_S
            burst=float(max(1, device_burst or settings.BRIDGE_DEVICE_BURST)),
            drop_flush_s=settings.BRIDGE_DROP_FLUSH_S if drop_flush_s is None else drop_flush_s,
            drop_recorder=drop_recorder or database_drop_recorder,
        )
        # What a lost connection costs: a takeover backs off, too many in a row stop the bridge.
        self._session = BridgeSession(
            client_id=self._client_id, max_in_row=takeover_max or settings.BRIDGE_TAKEOVER_MAX
        )
        self._retire = retire  # on stop, end the session if everything was committed
        self._connection = 0
        self._unacked = 0  # received on the current connection, not yet acknowledged
        self._ready = threading.Event()
        self._stop_event = threading.Event()
        self._thread: threading.Thread | None = None
        self._client: paho.Client | None = None
        self._connected_once = False
        self._loss: ReasonCode | None = None  # of the DISCONNECT the broker sent last
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
        """Commit and acknowledge what can be committed, then disconnect keeping the
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
        only when the very first connection is refused for a reason retrying cannot fix,
        ``SessionTakenOver`` when other clients keep taking its session over (``session``)."""
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
            before = self._batcher.pending()
            rc = client.loop(timeout=self._batcher.wait_s(LOOP_MAX_WAIT_S))
            if rc != MQTTErrorCode.MQTT_ERR_SUCCESS:
                self._idle_while_disconnected(self._connection_lost(rc))
                if not self._connect(client):
                    return
                continue
            if self._batcher.flush_due(self._unacked, self._batcher.pending() - before):
                self._batcher.flush()
            self._limits.maintain()
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

    def _connect(self, client: paho.Client) -> bool:
        """Connect with capped backoff, logging each attempt; False if stopped first. While
        MQTT is down, what we already hold is still committed (its redelivery is deduped)."""
        delay, attempt = RECONNECT_FIRST_BACKOFF_S, 0
        while not self._stop_event.is_set():
            attempt += 1
            try:
                connect(client, config=self._config, keepalive=KEEPALIVE_S, attempts=1)
            except MqttUnavailable as exc:
                transient = getattr(exc.__cause__, "transient", True)
                if not transient and not self._connected_once:
                    raise
                self._session.connect_failed()
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
            self._session.connected(attempt, reconnect=self._connected_once)
            self._connected_once = True
            return True
        return False

    def _idle_while_disconnected(self, delay_s: float) -> None:
        deadline = time.monotonic() + delay_s
        while not self._stop_event.is_set():
            if self._batcher.flush_due(self._unacked) or self._batcher.retry_due():
                self._batcher.flush()
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return
            self._stop_event.wait(min(remaining, LOOP_MAX_WAIT_S))

    def _connection_lost(self, rc: MQTTErrorCode) -> float:
        """The seconds to wait before reconnecting (``BridgeSession.lost``)."""
        self._ready.clear()
        self._connection += 1  # what the old connection delivered is redelivered, not acked
        self._unacked = 0
        loss, self._loss = self._loss, None
        return self._session.lost(loss, paho.error_string(rc), held=self._batcher.pending())

    def _shutdown(self, client: paho.Client) -> None:
        if self._batcher.pending():
            self._batcher.flush()
        self._limits.record_drops()
        left = self._batcher.pending()
        if left:
            logger.warning(
                "bridge %s stopping with %d message(s) not committed; the broker redelivers them",
                self._client_id,
                left,
                extra={"bridgeClientId": self._client_id},
            )
        self._ready.clear()
        if client.is_connected() and self._retire and not left:
            session_end(client, self._config, self._client_id)
        elif client.is_connected():
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
        if self._retire:  # what the session holds still arrives; no new share of the group's
            client.unsubscribe(topics)
            self._ready.set()
        else:
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
        self, client: paho.Client, userdata: Any, flags: Any, reason: ReasonCode, properties: Any
    ) -> None:
        self._loss = reason if flags.is_disconnect_packet_from_server else None

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
            self._ack(Entry(None, message.mid, message.qos, self._connection))

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
            self._ack(Entry(None, message.mid, message.qos, self._connection))
            return
        serial, kind = parsed
        # Every line logged while this message is handled names its device (docs/spec.md §9).
        with bound_contextvars(serialNumber=serial):
            self._take(serial, kind, message, received_at)

    def _take(
        self, serial: str, kind: TopicKind, message: paho.MQTTMessage, received_at: datetime
    ) -> None:
        """Queue one device message for the next batch commit (telemetry or device reply)."""
        payload = bytes(message.payload)
        self._stats.received[kind] += 1
        if self._limits.refuse(serial, kind, payload, received_at):
            self._ack(Entry(None, message.mid, message.qos, self._connection))
            return
        if kind is TopicKind.TELEMETRY:
            arg = InboundTelemetry.from_bytes(serial, payload, received_at).to_task_arg()
            key = dedupe_key(serial, payload) if self._batcher.dedupes else None
            self._batcher.add(
                TELEMETRY_INGEST, Entry(arg, message.mid, message.qos, self._connection, key)
            )
        else:
            arg = DeviceMessage.from_bytes(serial, kind.value, payload, received_at).to_task_arg()
            self._batcher.add(
                DEVICE_MESSAGES_RECONCILE,
                Entry(arg, message.mid, message.qos, self._connection),
                reply=(serial, kind.value),
            )

    def _ack(self, entry: Entry) -> None:
        client = self._client
        if entry.qos == 0 or entry.connection != self._connection or client is None:
            return
        if client.ack(entry.mid, entry.qos) == MQTTErrorCode.MQTT_ERR_SUCCESS:
            self._stats.acked += 1
        self._unacked -= 1
