"""A sensor fleet that counts what the MQTT broker accepted: distinct QoS 1 readings at a
steady rate, each remembered by its message id until its PUBACK names it. The acceptance of
issue 39 is stated over exactly that set ("every reading the fleet had PUBACKed is persisted
once"), so the fleet, not the product, says what must be in the database."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import Any

import paho.mqtt.client as paho
from django.conf import settings

from config.env import MqttConfig
from devices.mqtt.client import connect, new_client
from devices.mqtt.contract import telemetry_payload, telemetry_topic

HOT_C = 35.0  # above the hot rule's threshold (tests/chaos/test_chaos_edge.py)
COOL_C = 15.0  # below the cool rule's
FLIP_EVERY = 12  # readings of one sensor before its temperature crosses to the other side
MIN_TS_STEP = timedelta(milliseconds=1)  # no two readings share a device time
NO_MATCHING_SUBSCRIBERS = 0x10  # MQTT 5 PUBACK: accepted, but nobody was subscribed


@dataclass(frozen=True)
class Reading:
    """One telemetry message as the sensor sent it: ``seq`` is also its humidity value."""

    serial: str
    seq: int
    ts: datetime
    temp: float


@dataclass(frozen=True)
class Puback:
    """What the broker answered to one reading (an MQTT 5 reason code; 0 is success)."""

    reading: Reading
    reason: int


@dataclass
class _Sender:
    """One paho connection and the readings it has in flight, by message id. The PUBACK
    callback only appends (it runs under paho's own lock, which ``publish`` also takes)."""

    client: paho.Client
    by_mid: dict[int, Reading]
    acks: list[tuple[int, int]]


class PubackFleet:
    """Sensors spread over a few MQTT connections. ``start`` publishes ``total`` readings
    round-robin over the sensors at ``rate_per_s`` from a thread of its own; ``accepted``
    is every reading whose PUBACK came back with a success code."""

    def __init__(self, port: int, serials: Sequence[str], *, connections: int = 4) -> None:
        configured: MqttConfig = settings.MQTT
        # MQTT 5, whatever the product's default: its PUBACK says when nobody was subscribed.
        config = replace(configured, host="127.0.0.1", port=port, embedded=False, protocol=5)
        stamp = time.monotonic_ns()
        self.serials = list(serials)
        self._senders: list[_Sender] = []
        for n in range(connections):
            client = new_client(f"edge-fleet-{stamp}-{n}", config=config)
            sender = _Sender(client, {}, [])
            client.on_publish = self._on_publish(sender.acks)
            connect(client, config=config, attempts=20, max_backoff_s=1.0)
            client.loop_start()
            self._senders.append(sender)
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None
        self._clock = datetime.now(UTC)
        self.total = 0
        self.sent = 0

    @staticmethod
    def _on_publish(acks: list[tuple[int, int]]) -> Callable[..., None]:
        def on_publish(
            client: paho.Client, userdata: Any, mid: int, reason: Any, properties: Any
        ) -> None:
            acks.append((mid, int(getattr(reason, "value", reason))))

        return on_publish

    def temp_of(self, index: int, seq: int) -> float:
        """Hot and cool in turns of FLIP_EVERY readings, each sensor at its own phase so the
        crossings (and the commands they decide) are spread over the run."""
        return HOT_C if ((seq + 5 * index) // FLIP_EVERY) % 2 == 0 else COOL_C

    def start(self, total: int, rate_per_s: float) -> None:
        self.total = total
        self._thread = threading.Thread(
            target=self._run, args=(total, rate_per_s), name="edge-fleet", daemon=True
        )
        self._thread.start()

    def _run(self, total: int, rate_per_s: float) -> None:
        started = time.monotonic()
        try:
            for n in range(total):
                pause = started + n / rate_per_s - time.monotonic()
                if pause > 0:
                    time.sleep(pause)  # pacing, not waiting for something
                index, seq = n % len(self.serials), n // len(self.serials)
                self._publish(n, index, seq)
        except BaseException as exc:  # reported by wait_sent, in the test's thread
            self._error = exc

    def _publish(self, n: int, index: int, seq: int) -> None:
        self._clock = max(datetime.now(UTC), self._clock + MIN_TS_STEP)
        serial = self.serials[index]
        reading = Reading(serial, seq, self._clock, self.temp_of(index, seq))
        payload = telemetry_payload(reading.ts, {"temp": reading.temp, "humidity": seq})
        sender = self._senders[n % len(self._senders)]
        info = sender.client.publish(telemetry_topic(serial), payload, qos=1)
        if info.rc != paho.MQTT_ERR_SUCCESS and info.rc != paho.MQTT_ERR_NO_CONN:
            raise AssertionError(f"paho refused reading {n}: {paho.error_string(info.rc)}")
        sender.by_mid[info.mid] = reading
        self.sent += 1

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def answered(self) -> int:
        return sum(len(s.acks) for s in self._senders)

    def wait_sent(self, fraction: float, timeout_s: float) -> None:
        """Until ``fraction`` of the run has been published (a scenario's cue for a fault)."""
        deadline = time.monotonic() + timeout_s
        assert self._thread is not None
        while time.monotonic() < deadline:
            if self._error is not None:
                raise AssertionError(f"the fleet stopped publishing: {self._error!r}")
            if not self.running or self.sent >= fraction * self.total:
                return
            time.sleep(0.05)
        raise AssertionError(f"the fleet had sent {self.sent} readings after {timeout_s:.0f}s")

    def done(self) -> bool:
        """Everything published and answered by the broker."""
        if self._error is not None:
            raise AssertionError(f"the fleet stopped publishing: {self._error!r}")
        return not self.running and self.answered() >= self.sent

    def pubacks(self) -> list[Puback]:
        """Every answer the broker gave, matched to its reading."""
        return [
            Puback(sender.by_mid[mid], reason)
            for sender in self._senders
            for mid, reason in list(sender.acks)
            if mid in sender.by_mid
        ]

    def accepted(self) -> list[Reading]:
        return [p.reading for p in self.pubacks() if p.reason < 0x80]

    def unanswered(self) -> list[Reading]:
        """Published, and no PUBACK (yet): not in the broker's care as far as we know."""
        answered = {(p.reading.serial, p.reading.ts) for p in self.pubacks()}
        return [
            r
            for sender in self._senders
            for r in list(sender.by_mid.values())
            if (r.serial, r.ts) not in answered
        ]

    def close(self) -> None:
        for sender in self._senders:
            sender.client.disconnect()
            sender.client.loop_stop()
