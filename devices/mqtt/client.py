"""MQTT connection plumbing shared by the bridge, the dispatcher and the device simulator.

Guarantees: every client speaks the configured protocol (v5 on Mosquitto, 3.1.1 on the
embedded amqtt broker), sets TCP_NODELAY (small request/response packets must not wait for
Nagle's algorithm; docs/spec.md §11), and reconnects with capped exponential backoff. The
backend's client ids (``backend_client_id``) are ids no device can take. The dispatcher's
long-lived publisher is in ``devices.mqtt.publisher``.
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

from config.env import BACKEND_CLIENT_ID_MARK, MqttConfig

logger = logging.getLogger("devices.mqtt")

CONNACK_TIMEOUT_S = 10.0
FIRST_BACKOFF_S = 0.5
RECONNECT_MIN_DELAY_S = 1
SUBACK_TIMEOUT_S = 5.0
# CONNACK refusals worth retrying: the broker is overloaded or restarting, not misconfigured.
# 0x88 server unavailable, 0x89 server busy, 0x97 quota exceeded, 0x9F connection rate exceeded.
TRANSIENT_CONNACK_CODES = frozenset({0x88, 0x89, 0x97, 0x9F})

MessageHandler = Callable[[paho.Client, Any, paho.MQTTMessage], None]


class MqttError(Exception):
    """Base of this module's errors, so a caller can catch both with one clause."""


class MqttUnavailable(MqttError):
    """The broker could not be reached (or refused us) within the allowed attempts."""


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


def default_config() -> MqttConfig:
    from django.conf import settings

    config: MqttConfig = settings.MQTT
    return config


def backend_client_id(role: str, name: str | None = None) -> str:
    """``farm-<role>/<name>``, a client id no device can take (``BACKEND_CLIENT_ID_MARK``).
    Without ``name``: host, pid and a random suffix, unique per process and restart, for
    the clients that keep no session; only a persistent session needs a stable name."""
    if not name:
        host = socket.gethostname().split(".")[0][:20]
        name = f"{host}-{os.getpid()}-{uuid.uuid4().hex[:6]}"
    return f"farm-{role}{BACKEND_CLIENT_ID_MARK}{name}"


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
    config = config or default_config()
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


def connect_kwargs(client: paho.Client, config: MqttConfig) -> dict[str, Any]:
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
    return options.config if options is not None else default_config()


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
        client.connect(config.host, config.port, keepalive, **connect_kwargs(client, config))
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
