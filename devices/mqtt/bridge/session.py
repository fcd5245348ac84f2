"""The bridge's broker session: the client id it is keyed on, and what the bridge does when
its connection is lost, in particular when another client with the same id takes it over.

Guarantees: after a takeover the bridge waits a doubling backoff before it reconnects, so two
bridges with one client id cannot kick each other thousands of times a second; takeovers are
logged at most once per ``log_interval_s``; the ``max_in_row``-th takeover in a row raises
``SessionTakenOver``, whose message names BRIDGE_SLOT_PREFIX, so the process exits instead
of fighting (the slot supervisor raises it only while it still holds the slot's lease: two
deployments with their own databases on one broker). A takeover is a DISCONNECT with reason
code 0x8E ("Session taken over", MQTT v5), or two connections in a row closed without a
DISCONNECT soon after their CONNACK: Mosquitto 2.0 (measured: 2.0.11, v5 as 3.1.1) only
closes the old connection's socket. A connection that outlived the backoff, a failed connect
(the broker was away) or a DISCONNECT with another reason ends the run.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable

import paho.mqtt.client as paho
from django.conf import settings
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties
from paho.mqtt.reasoncodes import ReasonCode

from config.env import MqttConfig
from config.env_bridge import bridge_slot_client_id
from devices.mqtt.client import MqttError, forget_session

logger = logging.getLogger("devices.mqtt.bridge")

SESSION_TAKEN_OVER = 0x8E  # MQTT v5 DISCONNECT reason code
TAKEOVER_FIRST_BACKOFF_S = 1.0
TAKEOVER_MAX_BACKOFF_S = 60.0
TAKEOVER_LOG_INTERVAL_S = 60.0
# A connection closed within this (plus twice the current backoff) of its CONNACK is short:
# two short connections in a row, closed with no DISCONNECT, are how a takeover shows.
SHORT_CONNECTION_S = 5.0


def default_client_id() -> str:
    """Slot 0's client id (``<BRIDGE_SLOT_PREFIX>/0``), for a bridge run in-process with no
    lease (the embedded demo): no host name in it, so a recreated host resumes its session.
    ``manage.py mqtt_bridge`` always names the slot it holds."""
    return bridge_slot_client_id(settings.BRIDGE_SLOT_PREFIX, 0)


def session_end(client: paho.Client, config: MqttConfig, client_id: str) -> None:
    """Disconnect and end the persistent session, so a retired bridge's id takes no more
    share of the shared group's messages: v5 sets the session expiry to 0 in DISCONNECT;
    3.1.1 has no such field, so it connects once more with a clean session."""
    if config.protocol != 5:
        client.disconnect()
        forget_session(config, client_id)
        return
    properties = Properties(PacketTypes.DISCONNECT)
    properties.SessionExpiryInterval = 0
    client.disconnect(properties=properties)


class SessionTakenOver(MqttError):
    """Another client keeps taking the bridge's session over: stop, do not fight for it."""


class BridgeSession:
    """Times the bridge's connections and decides, per lost connection, how long to wait."""

    def __init__(
        self,
        *,
        client_id: str,
        max_in_row: int,
        first_backoff_s: float = TAKEOVER_FIRST_BACKOFF_S,
        max_backoff_s: float = TAKEOVER_MAX_BACKOFF_S,
        log_interval_s: float = TAKEOVER_LOG_INTERVAL_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._client_id = client_id
        self._max_in_row = max(1, max_in_row)
        self._first_backoff_s = first_backoff_s
        self._max_backoff_s = max_backoff_s
        self._log_interval_s = log_interval_s
        self._clock = clock
        self._in_row = 0  # takeovers since the last stable connection or ordinary loss
        self._short_in_row = 0  # connections in a row closed soon after their CONNACK
        self._connected_at: float | None = None
        self._backing_off = False
        self._logged_at: float | None = None
        self._not_logged = 0  # takeovers since the last line about them

    @property
    def taken_over_in_row(self) -> int:
        return self._in_row

    def backoff_s(self, in_row: int) -> float:
        """The wait after the ``in_row``-th takeover in a row: 1, 2, 4 … capped."""
        if in_row <= 0:
            return 0.0
        return min(self._max_backoff_s, self._first_backoff_s * 2 ** (in_row - 1))

    def connected(self, attempt: int, *, reconnect: bool) -> None:
        """A CONNACK. A reconnect is logged unless it ends a takeover's backoff (the takeover
        was logged, at most once per interval)."""
        self._connected_at = self._clock()
        if reconnect and not self._backing_off:
            logger.warning(
                "bridge %s reconnected after %d attempt(s)",
                self._client_id,
                attempt,
                extra={"bridgeClientId": self._client_id, "attempt": attempt},
            )
        self._backing_off = False

    def connect_failed(self) -> None:
        """The broker was unreachable: the loss before was the broker's, not a takeover."""
        self._short_in_row = 0

    def lost(self, disconnect: ReasonCode | None, fallback: str, *, held: int) -> float:
        """The connection was lost, with the reason of the DISCONNECT the broker sent (None:
        the socket just closed, ``fallback`` says how): the seconds to wait before
        reconnecting (0 after an ordinary loss, which is logged). Raises
        ``SessionTakenOver`` on the ``max_in_row``-th takeover in a row."""
        now = self._clock()
        lived = math.inf if self._connected_at is None else now - self._connected_at
        self._connected_at = None
        stable = lived >= SHORT_CONNECTION_S + 2 * self.backoff_s(self._in_row)
        closed_short = disconnect is None and not stable
        self._short_in_row = self._short_in_row + 1 if closed_short else 0
        if stable:
            self._in_row = 0
        code = disconnect.value if disconnect is not None else None
        if code == SESSION_TAKEN_OVER or self._short_in_row >= 2:
            return self._taken_over(now)
        self._in_row = 0
        text = str(disconnect) if disconnect is not None else fallback
        logger.warning(
            "bridge %s lost its MQTT connection: %s; %d message(s) held, reconnecting",
            self._client_id,
            text,
            held,
            extra={"bridgeClientId": self._client_id, "reason": text},
        )
        return 0.0

    def _taken_over(self, now: float) -> float:
        self._in_row += 1
        if self._in_row >= self._max_in_row:
            raise SessionTakenOver(
                f"another MQTT client took over the session of bridge client id "
                f"{self._client_id!r} {self._in_row} times in a row: two bridges (or a bridge "
                f"and another client) use one id, e.g. two deployments with their own "
                f"databases on one broker. Give each deployment its own BRIDGE_SLOT_PREFIX; "
                f"BRIDGE_TAKEOVER_MAX={self._max_in_row}"
            )
        delay = self.backoff_s(self._in_row)
        self._backing_off = True
        self._not_logged += 1
        if self._logged_at is None or now - self._logged_at >= self._log_interval_s:
            logger.warning(
                "bridge %s: another MQTT client with the same client id took the session "
                "over (%d time(s) in a row, %d since the last such line); reconnecting in "
                "%.1fs, exiting after %d in a row. Give each deployment its own BRIDGE_SLOT_PREFIX",
                self._client_id,
                self._in_row,
                self._not_logged,
                delay,
                self._max_in_row,
                extra={
                    "bridgeClientId": self._client_id,
                    "takenOverInRow": self._in_row,
                    "retryInS": delay,
                },
            )
            self._logged_at, self._not_logged = now, 0
        return delay
