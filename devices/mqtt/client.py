"""MQTT connection plumbing shared by the bridge, the dispatcher and the device simulator.

Guarantees: every client speaks the configured protocol (v5 on Mosquitto, 3.1.1 on the
embedded amqtt broker), sets TCP_NODELAY (SPEC §11: request/response ~44 ms -> ~0.6 ms),
and reconnects with capped exponential backoff. ``Publisher.publish`` returns only after the
broker's PUBACK, so a caller that got a message id knows the broker holds the message; its
errors say whether the broker was reachable at all (``BrokerUnreachable``) or stayed silent.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import socket
import threading
import time
import uuid
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import paho.mqtt.client as paho
from paho.mqtt.enums import CallbackAPIVersion, MQTTErrorCode
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties
from paho.mqtt.reasoncodes import ReasonCode

from config.env import MqttConfig

logger = logging.getLogger("devices.mqtt")

CONNACK_TIMEOUT_S = 10.0
FIRST_BACKOFF_S = 0.5
RECONNECT_MIN_DELAY_S = 1
PUBLISHER_START_TIMEOUT_S = 5.0
# paho doubles its reconnect delay up to this cap while the broker stays away (and resets it
# after a CONNACK): a small cap means the publisher is back within ~2 s of the broker.
PUBLISHER_MAX_BACKOFF_S = 2
PUBLISHER_KEEPALIVE_S = 30
PUBLISH_TIMEOUT_S = 5.0
PUBACK_POLL_S = 0.05  # how soon a publish waiting for its PUBACK notices a lost connection
SUBACK_TIMEOUT_S = 5.0
# CONNACK refusals worth retrying: the broker is overloaded or restarting, not misconfigured.
# 0x88 server unavailable, 0x89 server busy, 0x97 quota exceeded, 0x9F connection rate exceeded.
TRANSIENT_CONNACK_CODES = frozenset({0x88, 0x89, 0x97, 0x9F})

MessageHandler = Callable[[paho.Client, Any, paho.MQTTMessage], None]


class MqttError(Exception):
    """Base of this module's errors, so a caller can catch both with one clause."""


class MqttUnavailable(MqttError):
    """The broker could not be reached (or refused us) within the allowed attempts."""


class PublishError(MqttError):
    """A publish was not confirmed by a PUBACK. "Not confirmed" is not "not sent": paho
    keeps an unacknowledged QoS 1 message and resends it after a reconnect, so a retry by
    the caller may deliver twice (consumers are idempotent by commandId, SPEC §3.7)."""


class BrokerUnreachable(PublishError):
    """No connection to the broker: the message was not handed over, or the connection was
    lost before its PUBACK (paho then resends it after reconnecting). Retrying once the
    publisher is connected again is the remedy; the broker's health, not the message's."""


class PubackTimeout(PublishError):
    """Connected, but the broker did not acknowledge within the timeout: it may hold (and
    deliver) the message, or be stalled."""


class _ConnectRefused(Exception):
    """A CONNACK with a failure reason code; ``transient`` says whether retrying can help."""

    def __init__(self, reason: ReasonCode) -> None:
        super().__init__(f"broker refused the connection: {reason}")
        self.transient = reason.value in TRANSIENT_CONNACK_CODES


@dataclass(frozen=True)
class _ConnectOptions:
    """What ``new_client`` decided and ``connect`` must apply (paho takes v5 session options
    at connect time, not at construction)."""

    client_id: str
    config: MqttConfig
    clean_start: bool
    session_expiry_s: int


_options: weakref.WeakKeyDictionary[paho.Client, _ConnectOptions] = weakref.WeakKeyDictionary()


def _default_config() -> MqttConfig:
    from django.conf import settings

    config: MqttConfig = settings.MQTT
    return config


def _set_tcp_nodelay(client: paho.Client, userdata: Any, sock: Any) -> None:
    """paho's on_socket_open hook: small MQTT packets must not wait for Nagle's algorithm."""
    with contextlib.suppress(AttributeError, OSError):  # not TCP (unix/websocket transport)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


def new_client(
    client_id: str,
    *,
    config: MqttConfig | None = None,
    clean_start: bool = True,
    session_expiry_s: int = 0,
    manual_ack: bool = False,
) -> paho.Client:
    """A paho 2 client configured from ``MqttConfig``; connect it with ``connect()``.

    ``clean_start=False`` keeps the broker-side session (subscriptions and queued QoS 1
    messages) across reconnects: v5 sends the session expiry in CONNECT, 3.1.1 maps it to
    ``clean_session=False`` (the broker then decides how long to keep it).
    """
    config = config or _default_config()
    v5 = config.protocol == 5
    client = paho.Client(
        CallbackAPIVersion.VERSION2,
        client_id=client_id,
        clean_session=None if v5 else clean_start,
        protocol=paho.MQTTv5 if v5 else paho.MQTTv311,
        manual_ack=manual_ack,
    )
    if config.username is not None:
        client.username_pw_set(config.username, config.password)
    if config.tls:
        client.tls_set()  # system CA store, hostname checked
    client.on_socket_open = _set_tcp_nodelay
    _options[client] = _ConnectOptions(client_id, config, clean_start, session_expiry_s)
    return client


def _connect_kwargs(client: paho.Client, config: MqttConfig) -> dict[str, Any]:
    options = _options.get(client)
    if config.protocol != 5 or options is None:
        return {}
    properties = Properties(PacketTypes.CONNECT)
    if options.session_expiry_s > 0:
        properties.SessionExpiryInterval = options.session_expiry_s
    return {"clean_start": options.clean_start, "properties": properties}


def _config_for(client: paho.Client, config: MqttConfig | None) -> MqttConfig:
    if config is not None:
        return config
    options = _options.get(client)
    return options.config if options is not None else _default_config()


def _connect_once(client: paho.Client, config: MqttConfig, keepalive: int) -> None:
    """TCP connect, CONNECT, and wait for the CONNACK by running the network loop here, so
    the caller learns about refused credentials now, not from a silent background thread."""
    outcome: list[ReasonCode] = []
    user_on_connect: Any = client.on_connect  # a VERSION2 callback, set by the caller

    def on_connect(
        c: paho.Client, userdata: Any, flags: Any, reason: ReasonCode, properties: Any
    ) -> None:
        outcome.append(reason)
        if user_on_connect is not None:
            user_on_connect(c, userdata, flags, reason, properties)

    client.on_connect = on_connect
    try:
        client.connect(config.host, config.port, keepalive, **_connect_kwargs(client, config))
        deadline = time.monotonic() + CONNACK_TIMEOUT_S
        while not outcome:
            rc = client.loop(timeout=0.1)
            if outcome:
                break
            if rc != MQTTErrorCode.MQTT_ERR_SUCCESS:
                raise ConnectionError(f"connection closed before CONNACK: {paho.error_string(rc)}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"no CONNACK within {CONNACK_TIMEOUT_S}s")
    finally:
        client.on_connect = user_on_connect
    if outcome[0].is_failure:
        raise _ConnectRefused(outcome[0])


def connect(
    client: paho.Client,
    *,
    config: MqttConfig | None = None,
    keepalive: int = 30,
    attempts: int | None = None,
    max_backoff_s: float = 10.0,
) -> None:
    """Connect and wait for the CONNACK, retrying with exponential backoff; raise
    ``MqttUnavailable`` after ``attempts`` failures (None: retry forever) or at once when
    the broker refuses for a reason retrying cannot fix (credentials, client id).

    Call it before starting the network loop; ``on_connect`` fires during the call, which
    is where subscriptions belong (it fires again after every automatic reconnect). paho's
    reconnect delays are set too, so ``loop_forever``/``loop_start`` recover from a broker
    restart with the same capped backoff.
    """
    config = _config_for(client, config)
    max_delay = max(RECONNECT_MIN_DELAY_S, math.ceil(max_backoff_s))
    client.reconnect_delay_set(min_delay=RECONNECT_MIN_DELAY_S, max_delay=max_delay)
    delay = min(FIRST_BACKOFF_S, max_backoff_s)
    attempt = 0
    while True:
        attempt += 1
        try:
            _connect_once(client, config, keepalive)
            options = _options.get(client)
            logger.info(
                "MQTT client %s connected to %s:%s",
                options.client_id if options else "?",
                config.host,
                config.port,
            )
            return
        except _ConnectRefused as exc:
            if not exc.transient:
                raise MqttUnavailable(f"{config.host}:{config.port}: {exc}") from exc
            error: Exception = exc
        except (OSError, TimeoutError) as exc:  # refused, unreachable, TLS failure, no CONNACK
            error = exc
        last = attempts is not None and attempt >= attempts
        logger.warning(
            "MQTT connect to %s:%s failed (attempt %d%s): %s%s",
            config.host,
            config.port,
            attempt,
            f"/{attempts}" if attempts else "",
            error,
            "" if last else f"; retrying in {delay:.1f}s",
        )
        if last:
            raise MqttUnavailable(
                f"{config.host}:{config.port} unavailable after {attempt} attempts: {error}"
            ) from error
        time.sleep(delay)
        delay = min(delay * 2, max_backoff_s)


def start_client(
    client_id: str,
    *,
    config: MqttConfig | None = None,
    subscribe: Sequence[str] = (),
    qos: int = 1,
    on_message: MessageHandler | None = None,
    clean_start: bool = True,
    session_expiry_s: int = 0,
    manual_ack: bool = False,
    max_inflight: int | None = None,
    suback_timeout_s: float = SUBACK_TIMEOUT_S,
) -> paho.Client:
    """A connected client with its network loop running (``loop_start``); with ``subscribe``
    it returns only after the SUBACK, so a message published next is not missed. Tests and
    the benchmark use it for device-side and bare clients; the caller disconnects it."""
    client = new_client(
        client_id,
        config=config,
        clean_start=clean_start,
        session_expiry_s=session_expiry_s,
        manual_ack=manual_ack,
    )
    if max_inflight is not None:  # paho takes it only before connecting
        client.max_inflight_messages_set(max_inflight)
    subscribed = threading.Event()
    if on_message is not None:
        client.on_message = on_message
    if subscribe:

        def on_connect(c: paho.Client, *_: Any) -> None:
            c.subscribe([(topic, qos) for topic in subscribe])

        client.on_connect = on_connect
        client.on_subscribe = lambda *_: subscribed.set()
    connect(client, config=config, attempts=3, max_backoff_s=1.0)
    client.loop_start()
    if subscribe and not subscribed.wait(suback_timeout_s):
        client.disconnect()
        client.loop_stop()
        raise TimeoutError(f"no SUBACK for {list(subscribe)} within {suback_timeout_s}s")
    return client


def forget_session(config: MqttConfig, client_id: str) -> None:
    """Drop a persistent session from the broker (connect with a clean start, disconnect):
    an offline session left in a shared group keeps receiving its share of the group's
    messages, so short-lived bridges (tests, the benchmark) leave nothing behind."""
    client = new_client(client_id, config=config, clean_start=True, session_expiry_s=0)
    try:
        connect(client, config=config, attempts=3)
        client.disconnect()
    except Exception:  # the broker may be gone at teardown; nothing to forget then
        pass


class Publisher:
    """One long-lived connection per process for QoS 1 publishes from many threads.

    The network loop runs under ``loop_start()``, paho's threaded interface: every socket
    write happens on the loop thread and other threads only enqueue. ``loop_forever`` in a
    plain thread measured no faster for PUBACK latency here, and it lets publishing threads
    write to the socket concurrently, which paho does not guard. Measured (QoS 1, 140-byte
    payload): Mosquitto v5 p50 0.18 ms alone, ~0.9 ms p50 / ~7,500 msg/s from 8 threads;
    embedded amqtt p50 ~0.3 ms alone, ~2 ms p50 / ~3,800 msg/s from 8 threads.
    """

    def __init__(self, client_id: str | None = None, config: MqttConfig | None = None) -> None:
        self._config = config or _default_config()
        self._client_id = client_id or _default_client_id("pub")
        self._client: paho.Client | None = None
        self._connected = threading.Event()
        self._lock = threading.Lock()

    @property
    def client_id(self) -> str:
        return self._client_id

    def is_connected(self) -> bool:
        client = self._client
        return client is not None and client.is_connected()

    def wait_connected(self, timeout_s: float) -> bool:
        """Block until connected (e.g. after a broker restart); False on timeout."""
        return self._connected.wait(timeout_s)

    def start(self, timeout_s: float = PUBLISHER_START_TIMEOUT_S) -> None:
        """Open the connection and start the network thread; wait up to ``timeout_s`` for the
        first CONNACK. A broker that is down does not fail start: the thread keeps retrying
        with backoff, and ``publish`` raises ``PublishError`` until it is connected."""
        with self._lock:
            if self._client is not None:
                return
            client = new_client(self._client_id, config=self._config)
            client.on_connect = self._on_connect
            client.on_disconnect = self._on_disconnect
            client.on_connect_fail = self._on_connect_fail
            client.reconnect_delay_set(
                min_delay=RECONNECT_MIN_DELAY_S, max_delay=PUBLISHER_MAX_BACKOFF_S
            )
            client.connect_async(
                self._config.host,
                self._config.port,
                PUBLISHER_KEEPALIVE_S,
                **_connect_kwargs(client, self._config),
            )
            client.loop_start()
            self._client = client
        if not self._connected.wait(timeout_s):
            logger.warning(
                "MQTT publisher %s not connected to %s:%s after %.1fs; retrying in the background",
                self._client_id,
                self._config.host,
                self._config.port,
                timeout_s,
            )

    def publish(
        self,
        topic: str,
        payload: bytes | str,
        *,
        qos: int = 1,
        timeout_s: float = PUBLISH_TIMEOUT_S,
    ) -> int:
        """Publish and return the message id once the broker acknowledged it (PUBACK for
        QoS 1). Raises ``BrokerUnreachable`` when not connected or the connection drops
        before the PUBACK, ``PubackTimeout`` when a connected broker stays silent for
        ``timeout_s``, ``PublishError`` when paho refuses the message locally."""
        client = self._client
        if client is None or not client.is_connected():
            raise BrokerUnreachable(f"MQTT publisher not connected; {topic} not sent")
        info = client.publish(topic, payload, qos=qos)
        if info.rc == MQTTErrorCode.MQTT_ERR_NO_CONN:
            raise BrokerUnreachable(f"MQTT publisher not connected; {topic} queued in paho")
        if info.rc != MQTTErrorCode.MQTT_ERR_SUCCESS:
            raise PublishError(f"publish to {topic} failed: {paho.error_string(info.rc)}")
        deadline = time.monotonic() + timeout_s
        try:
            while not info.is_published() and (left := deadline - time.monotonic()) > 0:
                if not client.is_connected():
                    raise BrokerUnreachable(
                        f"connection lost before the PUBACK for {topic} (mid {info.mid})"
                    )
                info.wait_for_publish(min(left, PUBACK_POLL_S))
        except (RuntimeError, ValueError) as exc:
            raise PublishError(f"publish to {topic} failed: {exc}") from exc
        if not info.is_published():
            raise PubackTimeout(f"no PUBACK for {topic} (mid {info.mid}) within {timeout_s}s")
        return info.mid

    def close(self) -> None:
        """Disconnect cleanly and stop the network thread; messages still unacknowledged
        are dropped (their publish calls raise or already raised PublishError)."""
        with self._lock:
            client, self._client = self._client, None
        if client is None:
            return
        client.disconnect()
        client.loop_stop()
        self._connected.clear()

    def _on_connect(
        self, client: paho.Client, userdata: Any, flags: Any, reason: ReasonCode, properties: Any
    ) -> None:
        if reason.is_failure:
            logger.warning(
                "MQTT publisher %s refused by %s:%s: %s",
                self._client_id,
                self._config.host,
                self._config.port,
                reason,
            )
            return
        logger.info(
            "MQTT publisher %s connected to %s:%s",
            self._client_id,
            self._config.host,
            self._config.port,
        )
        self._connected.set()

    def _on_disconnect(
        self, client: paho.Client, userdata: Any, flags: Any, reason: ReasonCode, properties: Any
    ) -> None:
        self._connected.clear()
        if self._client is not None:  # not our own close()
            logger.warning(
                "MQTT publisher %s lost its connection: %s; reconnecting", self._client_id, reason
            )

    def _on_connect_fail(self, client: paho.Client, userdata: Any) -> None:
        logger.warning(
            "MQTT publisher %s cannot reach %s:%s; retrying with backoff",
            self._client_id,
            self._config.host,
            self._config.port,
        )


def _default_client_id(role: str) -> str:
    """Unique per process and restart, readable in broker logs: role-host-pid-random."""
    host = socket.gethostname().split(".")[0][:20]
    return f"{role}-{host}-{os.getpid()}-{uuid.uuid4().hex[:6]}"


_publisher: Publisher | None = None
_publisher_pid: int | None = None
_publisher_lock = threading.Lock()


def get_publisher() -> Publisher:
    """The process-wide publisher, started on first use. A forked child (Celery prefork)
    gets its own: the parent's socket and network thread do not survive a fork."""
    global _publisher, _publisher_pid
    publisher = _publisher
    if publisher is not None and _publisher_pid == os.getpid():
        return publisher
    with _publisher_lock:
        if _publisher is None or _publisher_pid != os.getpid():
            publisher = Publisher()
            publisher.start()
            _publisher, _publisher_pid = publisher, os.getpid()
        return _publisher


def close_publisher() -> None:
    """Close the process-wide publisher (worker shutdown, test teardown)."""
    global _publisher, _publisher_pid
    with _publisher_lock:
        publisher, _publisher, _publisher_pid = _publisher, None, None
    if publisher is not None:
        publisher.close()


def _forget_publisher_after_fork() -> None:
    """In a forked child, drop (never close) the inherited publisher: closing would send a
    DISCONNECT on the socket the parent still uses."""
    global _publisher, _publisher_pid, _publisher_lock
    _publisher, _publisher_pid = None, None
    _publisher_lock = threading.Lock()


os.register_at_fork(after_in_child=_forget_publisher_after_fork)
