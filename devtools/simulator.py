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
concurrently. Measured on this machine (Mosquitto with set_tcp_nodelay), the two loops are
within noise: bare paho ~10k msg/s QoS 1 either way; this simulator ~2,300 vs ~1,900
requests/s and ~0.7 ms request -> ack p50. The "~100 msg/s under loop_start" of docs/spec.md §11
did not reproduce once Nagle was off on both ends.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import threading
import time
from collections import Counter, OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

from paho.mqtt.client import Client, MQTTMessage

from config.env import MqttConfig
from devices.mqtt.client import connect, new_client
from devices.mqtt.contract import (
    ContractError,
    ResultCode,
    RpcRequest,
    RpcResponse,
    RpcStatus,
    StateReport,
    TopicKind,
    parse_rpc_request,
    parse_topic,
    rpc_request_topic,
    rpc_response_topic,
    state_topic,
    telemetry_payload,
    telemetry_topic,
)

logger = logging.getLogger(__name__)

QOS = 1
SUBSCRIBE_TIMEOUT_S = 10.0
REMEMBERED_COMMANDS_PER_DEVICE = 10_000  # like firmware, the dedupe memory is bounded
# Devices come back within ~2 s of their broker (paho's reconnect delay is capped here), so a
# broker restart does not outlast the backend's retry ladder on the device side.
RECONNECT_MAX_BACKOFF_S = 2.0


class FaultMode(StrEnum):
    NONE = "none"
    DROP_ACK = "drop_ack"  # applies, but the ack, state report and telemetry are lost
    DELAY_ACK = "delay_ack"  # applies now, replies after delay_s
    DUPLICATE_ACK = "duplicate_ack"  # every ack and state report is published twice
    NEVER_APPLY = "never_apply"  # acks "accepted" but changes nothing and reports nothing
    WRONG_VALUE = "wrong_value"  # applies and reports a value other than the requested one
    REJECT = "reject"  # answers "rejected" with reject_code, changes nothing
    OFFLINE = "offline"  # goes silent for offline_s: requests ignored, no telemetry
    NO_STATE = "no_state"  # applies and acks, but has no state topic: telemetry is the proof


# Faults on the reply path also hit replays of an applied command; the others only decide
# what happens to a command that has not been applied yet.
_REPLY_PATH_FAULTS = frozenset({FaultMode.DROP_ACK, FaultMode.DELAY_ACK, FaultMode.DUPLICATE_ACK})


@dataclass
class SimulatedDevice:
    """One simulated device: its serial, its live endpoint values and its fault.

    ``fault_times`` = K makes the fault hit only the first K requests of each commandId
    (then the device behaves); None makes it hit every request.
    """

    serial: str
    values: dict[str, object]
    fault: FaultMode = FaultMode.NONE
    reject_code: str = ResultCode.BUSY
    delay_s: float = 1.0
    offline_s: float = 10.0
    fault_times: int | None = None
    # RPC parameter name -> the name the device reports in telemetry, for firmware whose
    # command parameters are named apart from its endpoints (``rpc_param_key`` on the backend).
    param_keys: dict[str, str] = field(default_factory=dict)
    state_by_value_key: bool = False  # state reports name values as telemetry does

    def value_key(self, param: str) -> str:
        return self.param_keys.get(param, param)

    def __post_init__(self) -> None:
        rpc_request_topic(self.serial)  # raises ValueError for a serial unusable in topics
        self.values = dict(self.values)
        self.fault = FaultMode(self.fault)
        self.reject_code = ResultCode(self.reject_code)
        if self.reject_code is ResultCode.OK:
            raise ValueError("reject_code must be an error result code, not ok")
        if self.delay_s < 0 or self.offline_s < 0:
            raise ValueError("delay_s and offline_s must be >= 0")
        if self.fault_times is not None and self.fault_times < 0:
            raise ValueError("fault_times must be >= 0 or None")


@dataclass(frozen=True)
class SimulatorStats:
    requests: int
    applies: int
    acks: int
    state_reports: int
    telemetry: int
    malformed: int
    ignored_offline: int
    errors: int


@dataclass(frozen=True)
class _Replies:
    """What a device published for an applied command, kept so a repeat can replay it."""

    ack: bytes
    state: bytes


@dataclass
class _DeviceRuntime:
    completed: OrderedDict[str, _Replies] = field(default_factory=OrderedDict)
    offline_until: float = 0.0  # time.monotonic()


@dataclass(frozen=True)
class _Outgoing:
    serial: str
    kind: TopicKind
    payload: bytes
    command_id: str | None = None


class _Timeline:
    """One worker thread running callbacks at monotonic deadlines (delayed acks, periodic
    telemetry), so nothing ever sleeps on the MQTT network thread."""

    def __init__(self, name: str) -> None:
        self._queue: list[tuple[float, int, Callable[[], None]]] = []
        self._seq = itertools.count()
        self._cond = threading.Condition()
        self._stopped = False
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def call_later(self, delay_s: float, fn: Callable[[], None]) -> None:
        with self._cond:
            heapq.heappush(self._queue, (time.monotonic() + delay_s, next(self._seq), fn))
            self._cond.notify()

    def stop(self) -> None:
        with self._cond:
            self._stopped = True
            self._cond.notify()
        if self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join(timeout=5)

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._stopped and (
                    not self._queue or self._queue[0][0] > time.monotonic()
                ):
                    timeout = self._queue[0][0] - time.monotonic() if self._queue else None
                    self._cond.wait(timeout)
                if self._stopped:
                    return
                _, _, fn = heapq.heappop(self._queue)
            try:
                fn()
            except Exception:
                logger.exception("simulator timeline callback failed")


def _utc_now() -> datetime:
    return datetime.now(UTC)


def _wrong(value: object) -> object:
    """A value that differs from the requested one, of the same type where possible."""
    if isinstance(value, bool):
        return not value
    if isinstance(value, int | float):
        return value + 1
    if isinstance(value, str):
        return f"{value}-wrong"
    return None if value is not None else "wrong"


def _same_type(current: object, requested: object) -> bool:
    if isinstance(current, bool) or isinstance(requested, bool):
        return isinstance(current, bool) and isinstance(requested, bool)
    if isinstance(current, int | float):
        return isinstance(requested, int | float)
    return current is None or isinstance(requested, type(current))


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
        now: Callable[[], datetime] = _utc_now,
        connect_attempts: int | None = 10,
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
        self._lock = threading.Lock()
        self._runtime = {serial: _DeviceRuntime() for serial in self._devices}
        self._requests: Counter[tuple[str, str]] = Counter()
        self._applies: Counter[tuple[str, str]] = Counter()
        self._acks: Counter[tuple[str, str]] = Counter()
        self._states: Counter[tuple[str, str]] = Counter()
        self._malformed: Counter[str] = Counter()
        self._telemetry_sent = 0
        self._ignored_offline = 0
        self._errors = 0
        self._client: Client | None = None
        self._timeline: _Timeline | None = None
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
        self._timeline = _Timeline(f"{self._client_id}-timeline")
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
        self._publish([_Outgoing(serial, TopicKind.TELEMETRY, payload)])
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

    def _decide(
        self, device: SimulatedDevice, request: RpcRequest
    ) -> tuple[float, list[_Outgoing]]:
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
            replay = [_Outgoing(serial, TopicKind.RPC_RESPONSE, replies.ack, command_id)]
            if replies.state:  # b"" for a device with no state topic
                replay.append(_Outgoing(serial, TopicKind.STATE, replies.state, command_id))
            return self._reply_path(device, fault, replay)
        return self._first_time(device, runtime, request, fault)

    def _first_time(
        self,
        device: SimulatedDevice,
        runtime: _DeviceRuntime,
        request: RpcRequest,
        fault: FaultMode,
    ) -> tuple[float, list[_Outgoing]]:
        """A commandId not applied yet: refuse it, or apply it and remember the replies."""
        serial, command_id = device.serial, request.command_id
        if fault is FaultMode.REJECT:
            return 0.0, [self._reject(serial, command_id, device.reject_code, "simulated fault")]
        refusal = self._refusal(device, request.params)
        if refusal is not None:
            return 0.0, [self._reject(serial, command_id, *refusal)]
        ack = RpcResponse(command_id, RpcStatus.ACCEPTED, ResultCode.OK, None).to_json()
        if fault is FaultMode.NEVER_APPLY:
            return 0.0, [_Outgoing(serial, TopicKind.RPC_RESPONSE, ack, command_id)]

        applied = dict(request.params)  # reported back under the parameter names
        if fault is FaultMode.WRONG_VALUE:
            applied = {key: _wrong(value) for key, value in applied.items()}
        device.values.update({device.value_key(key): value for key, value in applied.items()})
        self._applies[serial, command_id] += 1
        now = self._now()
        if device.state_by_value_key:
            applied = {device.value_key(key): value for key, value in applied.items()}
        state = StateReport(command_id, applied, now).to_json()
        if fault is FaultMode.NO_STATE:
            state = b""
        runtime.completed[command_id] = _Replies(ack, state)
        if len(runtime.completed) > REMEMBERED_COMMANDS_PER_DEVICE:
            runtime.completed.popitem(last=False)
        replies = [_Outgoing(serial, TopicKind.RPC_RESPONSE, ack, command_id)]
        if state:
            replies.append(_Outgoing(serial, TopicKind.STATE, state, command_id))
        replies.append(
            _Outgoing(serial, TopicKind.TELEMETRY, telemetry_payload(now, dict(device.values)))
        )
        return self._reply_path(device, fault, replies)

    @staticmethod
    def _reply_path(
        device: SimulatedDevice, fault: FaultMode, messages: list[_Outgoing]
    ) -> tuple[float, list[_Outgoing]]:
        if fault is FaultMode.DROP_ACK:
            return 0.0, []
        if fault is FaultMode.DELAY_ACK:
            return device.delay_s, messages
        if fault is FaultMode.DUPLICATE_ACK:
            doubled: list[_Outgoing] = []
            for message in messages:
                doubled.append(message)
                if message.kind is not TopicKind.TELEMETRY:
                    doubled.append(message)
            return 0.0, doubled
        return 0.0, messages

    @staticmethod
    def _refusal(device: SimulatedDevice, params: dict[str, Any]) -> tuple[ResultCode, str] | None:
        if not params:
            return ResultCode.INVALID_PARAM, "params is empty"
        unknown = sorted(key for key in params if device.value_key(key) not in device.values)
        if unknown:
            return ResultCode.NOT_SUPPORTED, f"unknown endpoint(s): {', '.join(unknown)}"
        for key, value in params.items():
            if not _same_type(device.values[device.value_key(key)], value):
                return ResultCode.INVALID_PARAM, f"{key}: {value!r} has the wrong type"
        return None

    @staticmethod
    def _reject(serial: str, command_id: str, code: ResultCode | str, why: str) -> _Outgoing:
        ack = RpcResponse(command_id, RpcStatus.REJECTED, ResultCode(code), why).to_json()
        return _Outgoing(serial, TopicKind.RPC_RESPONSE, ack, command_id)

    # -- publishing ---------------------------------------------------------------------

    def _publish(self, messages: list[_Outgoing]) -> None:
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
        try:
            for serial in self._devices:
                self.publish_telemetry(serial)
        finally:
            timeline.call_later(interval, self._periodic_telemetry)
