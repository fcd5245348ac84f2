"""A fleet of simulated devices that speaks the firmware contract (docs/spec.md §3.7) over
real MQTT.

End-to-end tests, the demo and chaos tests use it in place of firmware. It guarantees what
firmware must: a command is applied at most once per commandId (a repeat replays the ack
and the state report), and a malformed request is counted and ignored, never a crash.
Fault modes break the reply path or the apply step on purpose, optionally only for the
first K requests of each commandId, so the backend's retry and reconcile paths can be
driven deterministically.

One paho client serves every device. It runs under ``loop_start()``: paho's own thread
wakes on every cross-thread publish (delayed acks, on-demand telemetry), while
``loop_forever()`` in a thread of ours would let those threads write to the socket
concurrently; the two measured alike once Nagle was off on both ends.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable
from datetime import datetime
from typing import Any

from paho.mqtt.client import Client, MQTTMessage

from config.env import MqttConfig
from devices.mqtt.client import connect, new_client
from devices.mqtt.contract import (
    ContractError,
    RpcRequest,
    TopicKind,
    parse_rpc_request,
    parse_topic,
    rpc_request_topic,
    rpc_response_topic,
    state_topic,
    telemetry_payload,
    telemetry_topic,
)
from devtools.simulator.devices import (
    DeviceRuntime,
    FaultMode,
    Outgoing,
    SimulatedDevice,
    SimulatorStats,
    TelemetryWave,
    Timeline,
    first_request,
    reply_path,
    utc_now,
)

logger = logging.getLogger("devtools.simulator")

QOS = 1
SUBSCRIBE_TIMEOUT_S = 10.0
# Devices come back within ~2 s of their broker (paho's reconnect delay is capped here), so a
# broker restart does not outlast the backend's retry ladder on the device side.
RECONNECT_MAX_BACKOFF_S = 2.0


class DeviceSimulator:
    """N simulated devices on one MQTT client. ``start()`` connects and subscribes to every
    device's request topic (QoS 1) and returns once the broker granted them."""

    def __init__(
        self,
        devices: Iterable[SimulatedDevice],
        *,
        config: MqttConfig | None = None,
        telemetry_interval_s: float | None = None,
        client_id: str = "device-simulator",
        now: Callable[[], datetime] = utc_now,
        connect_attempts: int | None = 10,
        wave: TelemetryWave | None = None,
    ) -> None:
        self._devices: dict[str, SimulatedDevice] = {}
        for device in devices:
            if device.serial in self._devices:
                raise ValueError(f"duplicate serial {device.serial}")
            self._devices[device.serial] = device
        if telemetry_interval_s is not None and telemetry_interval_s <= 0:
            raise ValueError("telemetry_interval_s must be > 0 or None")
        self._config = config
        self._telemetry_interval_s = telemetry_interval_s
        self._client_id = client_id
        self._now = now
        self._connect_attempts = connect_attempts
        self._wave = wave
        self._started_at = time.monotonic()
        self._lock = threading.Lock()
        self._runtime = {serial: DeviceRuntime() for serial in self._devices}
        self._requests: Counter[tuple[str, str]] = Counter()
        self._applies: Counter[tuple[str, str]] = Counter()
        self._acks: Counter[tuple[str, str]] = Counter()
        self._states: Counter[tuple[str, str]] = Counter()
        self._malformed: Counter[str] = Counter()
        self._telemetry_sent = 0
        self._ignored_offline = 0
        self._errors = 0
        self._client: Client | None = None
        self._timeline: Timeline | None = None
        self._subscribed = threading.Event()
        self._subscribe_mid: int | None = None
        self._subscribe_error: str | None = None

    # -- lifecycle ---------------------------------------------------------------------

    def start(self) -> None:
        if self._client is not None:
            raise RuntimeError("simulator already started")
        self._subscribed.clear()
        self._subscribe_error = None
        client = new_client(self._client_id, config=self._config)
        client.on_connect = self._on_connect
        client.on_subscribe = self._on_subscribe
        client.on_message = self._on_message
        self._client = client
        self._timeline = Timeline(f"{self._client_id}-timeline")
        self._timeline.start()
        try:
            connect(
                client,
                config=self._config,
                attempts=self._connect_attempts,
                max_backoff_s=RECONNECT_MAX_BACKOFF_S,
            )
            client.loop_start()
            if not self._subscribed.wait(SUBSCRIBE_TIMEOUT_S):
                raise TimeoutError(f"simulator not subscribed within {SUBSCRIBE_TIMEOUT_S}s")
            if self._subscribe_error:
                raise RuntimeError(self._subscribe_error)
        except BaseException:
            self.stop()
            raise
        if self._telemetry_interval_s is not None:
            self._timeline.call_later(self._telemetry_interval_s, self._periodic_telemetry)
        logger.info("device simulator started with %d devices", len(self._devices))

    def stop(self) -> None:
        """Stop the timeline, disconnect and join the network thread; idempotent."""
        timeline, client = self._timeline, self._client
        self._timeline, self._client = None, None
        if timeline is not None:
            timeline.stop()
        if client is not None:
            client.disconnect()
            client.loop_stop()

    def __enter__(self) -> DeviceSimulator:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    # -- thread-safe views -------------------------------------------------------------

    @property
    def serials(self) -> list[str]:
        return list(self._devices)

    @property
    def requests(self) -> Counter[tuple[str, str]]:
        """Requests received per (serial, commandId), repeats included (a copy)."""
        with self._lock:
            return Counter(self._requests)

    @property
    def applies(self) -> Counter[tuple[str, str]]:
        """Times each (serial, commandId) changed device values (a copy; 1 at most)."""
        with self._lock:
            return Counter(self._applies)

    @property
    def acks(self) -> Counter[tuple[str, str]]:
        """Acks published per (serial, commandId), accepted or rejected (a copy)."""
        with self._lock:
            return Counter(self._acks)

    @property
    def state_reports(self) -> Counter[tuple[str, str]]:
        with self._lock:
            return Counter(self._states)

    @property
    def malformed(self) -> int:
        with self._lock:
            return sum(self._malformed.values())

    @property
    def malformed_by_reason(self) -> Counter[str]:
        with self._lock:
            return Counter(self._malformed)

    def stats(self) -> SimulatorStats:
        with self._lock:
            return SimulatorStats(
                requests=sum(self._requests.values()),
                applies=sum(self._applies.values()),
                acks=sum(self._acks.values()),
                state_reports=sum(self._states.values()),
                telemetry=self._telemetry_sent,
                malformed=sum(self._malformed.values()),
                ignored_offline=self._ignored_offline,
                errors=self._errors,
            )

    def values_of(self, serial: str) -> dict[str, object]:
        with self._lock:
            return dict(self._devices[serial].values)

    def is_online(self, serial: str) -> bool:
        with self._lock:
            return self._runtime[serial].offline_until <= time.monotonic()

    # -- controls ----------------------------------------------------------------------

    def set_fault(
        self, serial: str, fault: FaultMode | str, *, fault_times: int | None = None, **kw: Any
    ) -> None:
        """Change a device's fault while running (chaos tests); kw: reject_code, delay_s,
        offline_s. fault_times counts every request of a commandId, earlier ones included."""
        with self._lock:
            device = self._devices[serial]
            checked = SimulatedDevice(
                serial,
                {},
                FaultMode(fault),
                kw.pop("reject_code", device.reject_code),
                kw.pop("delay_s", device.delay_s),
                kw.pop("offline_s", device.offline_s),
                fault_times,
            )
            if kw:
                raise TypeError(f"unexpected fault options: {sorted(kw)}")
            device.fault, device.reject_code = checked.fault, checked.reject_code
            device.delay_s, device.offline_s = checked.delay_s, checked.offline_s
            device.fault_times = checked.fault_times

    def set_state_by_value_key(self, serial: str, enabled: bool) -> None:
        with self._lock:
            self._devices[serial].state_by_value_key = enabled

    def set_offline(self, serial: str, seconds: float) -> None:
        """Take one device off the air for ``seconds`` from now (0 brings it back)."""
        with self._lock:
            self._runtime[serial].offline_until = time.monotonic() + seconds

    def publish_telemetry(
        self, serial: str, values: dict[str, object] | None = None, ts: datetime | None = None
    ) -> bool:
        """Merge ``values`` into the device's values and publish all of them; False (nothing
        sent) while the device is offline."""
        with self._lock:
            device = self._devices[serial]
            if self._runtime[serial].offline_until > time.monotonic():
                return False
            if values:
                device.values.update(values)
            payload = telemetry_payload(ts or self._now(), dict(device.values))
        self._publish([Outgoing(serial, TopicKind.TELEMETRY, payload)])
        return True

    # -- MQTT callbacks (paho network thread) -----------------------------------------

    def _on_connect(
        self, client: Client, userdata: object, flags: object, reason_code: Any, props: object
    ) -> None:
        if reason_code.is_failure:
            logger.warning("simulator connect refused: %s", reason_code)
            return
        topics = [(rpc_request_topic(serial), QOS) for serial in self._devices]
        if not topics:
            self._subscribed.set()
            return
        _, mid = client.subscribe(topics)
        self._subscribe_mid = mid

    def _on_subscribe(
        self, client: Client, userdata: object, mid: int, reason_codes: list[Any], props: object
    ) -> None:
        if mid != self._subscribe_mid:
            return
        refused = [str(code) for code in reason_codes if code.is_failure]
        if refused:
            self._subscribe_error = f"broker refused request subscriptions: {refused}"
        self._subscribed.set()

    def _on_message(self, client: Client, userdata: object, message: MQTTMessage) -> None:
        try:
            self._handle_message(message.topic, message.payload)
        except Exception:  # an exception here would kill paho's network loop
            with self._lock:
                self._errors += 1
            logger.exception("simulator failed on a message to %s", message.topic)

    # -- request handling -------------------------------------------------------------

    def _handle_message(self, topic: str, payload: bytes | bytearray) -> None:
        parsed = parse_topic(topic)
        if (
            parsed is None
            or parsed[1] is not TopicKind.RPC_REQUEST
            or parsed[0] not in self._devices
        ):
            with self._lock:
                self._malformed["unexpected_topic"] += 1
            return
        serial = parsed[0]
        try:
            request = parse_rpc_request(payload)
        except ContractError as exc:
            with self._lock:
                self._malformed[exc.reason_code.value] += 1
            logger.info("simulator %s dropped a malformed request: %s", serial, exc)
            return
        with self._lock:
            delay_s, outgoing = self._decide(self._devices[serial], request)
        if not outgoing:
            return
        if delay_s > 0 and self._timeline is not None:
            self._timeline.call_later(delay_s, lambda: self._publish(outgoing))
        else:
            self._publish(outgoing)

    def _decide(self, device: SimulatedDevice, request: RpcRequest) -> tuple[float, list[Outgoing]]:
        """Count the request and return (delay, messages) to publish for it. The caller holds
        the lock; nothing here touches the network."""
        serial, command_id = device.serial, request.command_id
        runtime = self._runtime[serial]
        self._requests[serial, command_id] += 1
        attempt = self._requests[serial, command_id]
        if runtime.offline_until > time.monotonic():
            self._ignored_offline += 1
            return 0.0, []
        fault = device.fault
        if device.fault_times is not None and attempt > device.fault_times:
            fault = FaultMode.NONE
        if fault is FaultMode.OFFLINE:
            runtime.offline_until = time.monotonic() + device.offline_s
            self._ignored_offline += 1
            return 0.0, []

        replies = runtime.completed.get(command_id)
        if replies is not None:  # a repeat: replay, never re-apply
            replay = [Outgoing(serial, TopicKind.RPC_RESPONSE, replies.ack, command_id)]
            if replies.state:  # b"" for a device with no state topic
                replay.append(Outgoing(serial, TopicKind.STATE, replies.state, command_id))
            return reply_path(device, fault, replay)
        delay_s, outgoing = first_request(device, runtime, request, fault, self._now())
        if command_id in runtime.completed:  # applied just now
            self._applies[serial, command_id] += 1
        return delay_s, outgoing

    def _publish(self, messages: list[Outgoing]) -> None:
        client = self._client
        if client is None:
            return
        topic_for = {
            TopicKind.RPC_RESPONSE: rpc_response_topic,
            TopicKind.STATE: state_topic,
            TopicKind.TELEMETRY: telemetry_topic,
        }
        for message in messages:
            client.publish(topic_for[message.kind](message.serial), message.payload, qos=QOS)
        with self._lock:
            for message in messages:
                key = (message.serial, message.command_id or "")
                if message.kind is TopicKind.RPC_RESPONSE:
                    self._acks[key] += 1
                elif message.kind is TopicKind.STATE:
                    self._states[key] += 1
                else:
                    self._telemetry_sent += 1

    def _periodic_telemetry(self) -> None:
        timeline, interval = self._timeline, self._telemetry_interval_s
        if timeline is None or interval is None:
            return
        wave, elapsed = self._wave, time.monotonic() - self._started_at
        try:
            for index, serial in enumerate(self._devices):
                values: dict[str, object] | None = (
                    {wave.key: wave.value(elapsed, index)} if wave else None
                )
                self.publish_telemetry(serial, values)
        finally:
            timeline.call_later(interval, self._periodic_telemetry)
