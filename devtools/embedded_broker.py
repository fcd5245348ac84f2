"""The embedded MQTT broker (amqtt, MQTT 3.1.1 only) behind the no-servers default: it lets
the bridge, the dispatcher and the simulator talk over real MQTT on loopback without
Mosquitto installed. It is a development and test convenience, never a production broker
(no persistent sessions, no shared subscriptions; see docs/spec.md §11)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import threading
from typing import Any

from config.env import MqttConfig

logger = logging.getLogger("devices.mqtt")

LOOPBACK = "127.0.0.1"
# amqtt and its state machine log every connection at INFO; keep only what needs attention.
_NOISY_LOGGERS = ("amqtt", "transitions")


def _quiet_amqtt_logs() -> None:
    for name in _NOISY_LOGGERS:
        logging.getLogger(name).setLevel(logging.WARNING)


def _broker_config(host: str, port: int) -> dict[str, Any]:
    """Loopback TCP only, anonymous access, no $SYS publisher and no packet logger (they cost
    throughput and flood the logs)."""
    return {
        "listeners": {
            "default": {"type": "tcp", "bind": f"{host}:{port}", "max_connections": 0},
        },
        "plugins": {
            "amqtt.plugins.authentication.AnonymousAuthPlugin": {"allow_anonymous": True},
        },
    }


def port_in_use(host: str, port: int) -> bool:
    """True when host:port cannot be bound (another process listens there). Binding instead of
    connecting keeps a probe out of that broker's logs as a broken client."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError:
            return True
    return False


class EmbeddedBroker:
    """An amqtt broker on its own asyncio loop in a daemon thread, so synchronous code
    (Django, Celery, pytest) can start and stop it like a subprocess."""

    def __init__(self, port: int, host: str = LOOPBACK) -> None:
        self._host = host
        self._port = port
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop_requested: asyncio.Event | None = None
        self._started = threading.Event()
        self._error: BaseException | None = None

    @property
    def host(self) -> str:
        return self._host

    @property
    def port(self) -> int:
        return self._port

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def start(self, timeout_s: float = 10) -> None:
        """Start the broker; return only once the port accepts connections (amqtt's start()
        returns after listen()), and raise the broker's own error (e.g. the port is taken)
        here instead of letting a client fail later."""
        if self.running:
            return
        _quiet_amqtt_logs()
        self._started.clear()
        self._error = None
        self._thread = threading.Thread(
            target=self._run, name=f"mqtt-embedded-broker-{self._port}", daemon=True
        )
        self._thread.start()
        if not self._started.wait(timeout_s):
            self.stop()
            raise TimeoutError(f"embedded MQTT broker did not start within {timeout_s}s")
        if self._error is not None:
            self._thread.join(timeout=1)
            self._thread = None
            raise self._error
        logger.info("embedded MQTT broker listening on %s:%s", self._host, self._port)

    def stop(self) -> None:
        """Close every client session and the listener; waits for the broker thread."""
        thread, loop, stop_requested = self._thread, self._loop, self._stop_requested
        if thread is None:
            return
        if loop is not None and stop_requested is not None:
            with contextlib.suppress(RuntimeError):  # loop already closed
                loop.call_soon_threadsafe(stop_requested.set)
        thread.join(timeout=10)
        self._thread = None
        logger.info("embedded MQTT broker on %s:%s stopped", self._host, self._port)

    def _run(self) -> None:
        try:
            asyncio.run(self._serve())
        except BaseException as exc:  # reported to start(); a daemon thread has nobody else
            if not self._started.is_set():
                self._error = exc
                self._started.set()
            else:
                logger.exception("embedded MQTT broker crashed")

    async def _serve(self) -> None:
        from amqtt.broker import Broker  # imported lazily: amqtt is heavy and rarely needed

        self._loop = asyncio.get_running_loop()
        self._stop_requested = asyncio.Event()
        broker = Broker(_broker_config(self._host, self._port))
        await broker.start()
        self._started.set()
        try:
            await self._stop_requested.wait()
        finally:
            await broker.shutdown()


_embedded: EmbeddedBroker | None = None
_embedded_pid: int | None = None
_embedded_lock = threading.Lock()


def ensure_embedded_broker(config: MqttConfig | None = None) -> EmbeddedBroker | None:
    """Start the embedded broker once per process when the configuration asks for it.

    Returns None when a real broker is configured (``MQTT_URL``), or when another process of
    the same deployment (e.g. the web process next to the bridge) already serves the port.
    """
    global _embedded, _embedded_pid
    if config is None:
        from django.conf import settings

        config = settings.MQTT
    if not config.embedded:
        return None
    with _embedded_lock:
        if _embedded is not None and _embedded_pid == os.getpid() and _embedded.running:
            return _embedded
        if port_in_use(LOOPBACK, config.port):
            logger.info(
                "MQTT port %s:%s is already served; not starting an embedded broker",
                LOOPBACK,
                config.port,
            )
            return None
        broker = EmbeddedBroker(config.port)
        broker.start()
        _embedded, _embedded_pid = broker, os.getpid()
        return broker
