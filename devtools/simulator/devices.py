"""The simulated devices themselves: their values and fault modes, and what a device does
with a request (refuse it, or apply it once per commandId and remember the replies), kept
apart from the MQTT plumbing of ``devtools.simulator.fleet``."""

from __future__ import annotations

import heapq
import itertools
import logging
import math
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

from devices.mqtt.contract import (
    ResultCode,
    RpcRequest,
    RpcResponse,
    RpcStatus,
    StateReport,
    TopicKind,
    rpc_request_topic,
    telemetry_payload,
)

logger = logging.getLogger("devtools.simulator")

REMEMBERED_COMMANDS_PER_DEVICE = 10_000  # like firmware, the dedupe memory is bounded


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
REPLY_PATH_FAULTS = frozenset({FaultMode.DROP_ACK, FaultMode.DELAY_ACK, FaultMode.DUPLICATE_ACK})


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
class TelemetryWave:
    """A reading that swings between ``low`` and ``high`` every ``period_s`` (a sine), each
    device a step out of phase, so threshold rules keep crossing and commands keep flowing
    in a long-running stack (``make up``) instead of one command per device and silence."""

    key: str
    low: float
    high: float
    period_s: float

    def __post_init__(self) -> None:
        if not self.low < self.high:
            raise ValueError("the wave's low must be below its high")
        if self.period_s <= 0:
            raise ValueError("the wave's period must be > 0")

    def value(self, elapsed_s: float, index: int) -> float:
        phase = 2 * math.pi * (elapsed_s / self.period_s + index * PHASE_STEP)
        middle, swing = (self.low + self.high) / 2, (self.high - self.low) / 2
        return round(middle + swing * math.sin(phase), 2)


PHASE_STEP = 0.1  # of a period, between consecutive devices


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
class Replies:
    """What a device published for an applied command, kept so a repeat can replay it."""

    ack: bytes
    state: bytes


@dataclass
class DeviceRuntime:
    completed: OrderedDict[str, Replies] = field(default_factory=OrderedDict)
    offline_until: float = 0.0  # time.monotonic()


@dataclass(frozen=True)
class Outgoing:
    serial: str
    kind: TopicKind
    payload: bytes
    command_id: str | None = None


class Timeline:
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


def utc_now() -> datetime:
    return datetime.now(UTC)


def wrong_value(value: object) -> object:
    """A value that differs from the requested one, of the same type where possible."""
    if isinstance(value, bool):
        return not value
    if isinstance(value, int | float):
        return value + 1
    if isinstance(value, str):
        return f"{value}-wrong"
    return None if value is not None else "wrong"


def same_type(current: object, requested: object) -> bool:
    if isinstance(current, bool) or isinstance(requested, bool):
        return isinstance(current, bool) and isinstance(requested, bool)
    if isinstance(current, int | float):
        return isinstance(requested, int | float)
    return current is None or isinstance(requested, type(current))


def reply_path(
    device: SimulatedDevice, fault: FaultMode, messages: list[Outgoing]
) -> tuple[float, list[Outgoing]]:
    if fault is FaultMode.DROP_ACK:
        return 0.0, []
    if fault is FaultMode.DELAY_ACK:
        return device.delay_s, messages
    if fault is FaultMode.DUPLICATE_ACK:
        doubled: list[Outgoing] = []
        for message in messages:
            doubled.append(message)
            if message.kind is not TopicKind.TELEMETRY:
                doubled.append(message)
        return 0.0, doubled
    return 0.0, messages


def request_refusal(
    device: SimulatedDevice, params: dict[str, Any]
) -> tuple[ResultCode, str] | None:
    if not params:
        return ResultCode.INVALID_PARAM, "params is empty"
    unknown = sorted(key for key in params if device.value_key(key) not in device.values)
    if unknown:
        return ResultCode.NOT_SUPPORTED, f"unknown endpoint(s): {', '.join(unknown)}"
    for key, value in params.items():
        if not same_type(device.values[device.value_key(key)], value):
            return ResultCode.INVALID_PARAM, f"{key}: {value!r} has the wrong type"
    return None


def reject(serial: str, command_id: str, code: ResultCode | str, why: str) -> Outgoing:
    ack = RpcResponse(command_id, RpcStatus.REJECTED, ResultCode(code), why).to_json()
    return Outgoing(serial, TopicKind.RPC_RESPONSE, ack, command_id)


# -- publishing ---------------------------------------------------------------------


def first_request(
    device: SimulatedDevice,
    runtime: DeviceRuntime,
    request: RpcRequest,
    fault: FaultMode,
    now: datetime,
) -> tuple[float, list[Outgoing]]:
    """A commandId not applied yet: refuse it, or apply it and remember the replies (the
    caller counts an apply when the commandId is then in ``runtime.completed``)."""
    serial, command_id = device.serial, request.command_id
    if fault is FaultMode.REJECT:
        return 0.0, [reject(serial, command_id, device.reject_code, "simulated fault")]
    refused = request_refusal(device, request.params)
    if refused is not None:
        return 0.0, [reject(serial, command_id, *refused)]
    ack = RpcResponse(command_id, RpcStatus.ACCEPTED, ResultCode.OK, None).to_json()
    if fault is FaultMode.NEVER_APPLY:
        return 0.0, [Outgoing(serial, TopicKind.RPC_RESPONSE, ack, command_id)]

    applied = dict(request.params)  # reported back under the parameter names
    if fault is FaultMode.WRONG_VALUE:
        applied = {key: wrong_value(value) for key, value in applied.items()}
    device.values.update({device.value_key(key): value for key, value in applied.items()})
    if device.state_by_value_key:
        applied = {device.value_key(key): value for key, value in applied.items()}
    state = StateReport(command_id, applied, now).to_json()
    if fault is FaultMode.NO_STATE:
        state = b""
    runtime.completed[command_id] = Replies(ack, state)
    if len(runtime.completed) > REMEMBERED_COMMANDS_PER_DEVICE:
        runtime.completed.popitem(last=False)
    replies = [Outgoing(serial, TopicKind.RPC_RESPONSE, ack, command_id)]
    if state:
        replies.append(Outgoing(serial, TopicKind.STATE, state, command_id))
    replies.append(
        Outgoing(serial, TopicKind.TELEMETRY, telemetry_payload(now, dict(device.values)))
    )
    return reply_path(device, fault, replies)
