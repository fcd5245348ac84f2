"""The dispatcher's MQTT publisher: one long-lived connection per process, shared by threads.

Guarantees: ``Publisher.publish`` returns only after the broker's PUBACK, so a caller that got
a message id knows the broker holds the message; its errors say whether the broker was
reachable at all (``BrokerUnreachable``) or stayed silent (``PubackTimeout``). After a
broker outage the publisher is back within ``PUBLISHER_MAX_BACKOFF_S`` of the broker.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Sequence
from typing import Any

import paho.mqtt.client as paho
from paho.mqtt.enums import MQTTErrorCode
from paho.mqtt.reasoncodes import ReasonCode

from config.env import MqttConfig
from devices.mqtt.client import (
    RECONNECT_MIN_DELAY_S,
    MqttError,
    backend_client_id,
    connect_kwargs,
    default_config,
    new_client,
)

logger = logging.getLogger("devices.mqtt")

PUBLISHER_START_TIMEOUT_S = 5.0
# paho doubles its reconnect delay up to this cap while the broker stays away (and resets it
# after a CONNACK): a small cap means the publisher is back within ~2 s of the broker.
PUBLISHER_MAX_BACKOFF_S = 2
PUBLISHER_KEEPALIVE_S = 30
PUBLISH_TIMEOUT_S = 5.0
PUBACK_POLL_S = 0.05  # how soon a publish waiting for its PUBACK notices a lost connection


class PublishError(MqttError):
    """A publish was not confirmed by a PUBACK. "Not confirmed" is not "not sent": paho
    keeps an unacknowledged QoS 1 message and resends it after a reconnect, so a retry by
    the caller may deliver twice (consumers are idempotent by commandId, docs/spec.md §3.7)."""


class BrokerUnreachable(PublishError):
    """No connection to the broker: the message was not handed over, or the connection was
    lost before its PUBACK (paho then resends it after reconnecting). Retrying once the
    publisher is connected again is the remedy; the broker's health, not the message's."""


class PubackTimeout(PublishError):
    """Connected, but the broker did not acknowledge within the timeout: it may hold (and
    deliver) the message, or be stalled."""


class Publisher:
    """One long-lived connection per process for QoS 1 publishes from many threads.

    The network loop runs under ``loop_start()``, paho's threaded interface: every socket
    write happens on the loop thread and other threads only enqueue. ``loop_forever`` in a
    plain thread was no faster for PUBACK latency (``make bench`` measures the command path),
    and it lets publishing threads write to the socket concurrently, which paho does not guard.
    """

    def __init__(self, client_id: str | None = None, config: MqttConfig | None = None) -> None:
        self._config = config or default_config()
        self._client_id = client_id or backend_client_id("publisher")
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
                **connect_kwargs(client, self._config),
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
        result = self.publish_many([(topic, payload)], qos=qos, timeout_s=timeout_s)[0]
        if isinstance(result, MqttError):
            raise result
        return result

    def publish_many(
        self,
        messages: Sequence[tuple[str, bytes | str]],
        *,
        qos: int = 1,
        timeout_s: float = PUBLISH_TIMEOUT_S,
    ) -> list[int | MqttError]:
        """``publish`` for a batch: every message goes out back to back, then the PUBACKs are
        awaited together (one round trip for the batch, not one per message). Per message,
        in order: its message id, or the error ``publish`` would have raised."""
        client = self._client
        if client is None or not client.is_connected():
            return [
                BrokerUnreachable(f"MQTT publisher not connected; {topic} not sent")
                for topic, _ in messages
            ]
        sent: list[tuple[str, paho.MQTTMessageInfo] | MqttError] = []
        for topic, payload in messages:
            info = client.publish(topic, payload, qos=qos)
            if info.rc == MQTTErrorCode.MQTT_ERR_NO_CONN:
                sent.append(BrokerUnreachable(f"MQTT publisher not connected; {topic} queued"))
            elif info.rc != MQTTErrorCode.MQTT_ERR_SUCCESS:
                sent.append(
                    PublishError(f"publish to {topic} failed: {paho.error_string(info.rc)}")
                )
            else:
                sent.append((topic, info))
        deadline = time.monotonic() + timeout_s
        return [
            item if isinstance(item, MqttError) else _puback(client, *item, deadline, timeout_s)
            for item in sent
        ]

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


def _puback(
    client: paho.Client, topic: str, info: paho.MQTTMessageInfo, deadline: float, timeout_s: float
) -> int | MqttError:
    """Wait (until ``deadline``) for one message's PUBACK: its id, or why not."""
    try:
        while not info.is_published() and (left := deadline - time.monotonic()) > 0:
            if not client.is_connected():
                return BrokerUnreachable(
                    f"connection lost before the PUBACK for {topic} (mid {info.mid})"
                )
            info.wait_for_publish(min(left, PUBACK_POLL_S))
    except (RuntimeError, ValueError) as exc:
        return PublishError(f"publish to {topic} failed: {exc}")
    if not info.is_published():
        return PubackTimeout(f"no PUBACK for {topic} (mid {info.mid}) within {timeout_s}s")
    return info.mid


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
