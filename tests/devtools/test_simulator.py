"""The device simulator over a real broker, seen from the backend's side of the contract.

A plain paho client plays the backend: it publishes rpc requests and listens to the
response, state and telemetry topics. What the tests pin down is what the backend relies
on: a command is applied once however often it is repeated, every repeat is answered, and
each fault mode breaks exactly the part of the exchange it names.
"""

from __future__ import annotations

import io
import json
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import pytest
from django.core.management import CommandError, call_command

from devices.mqtt.contract import (
    RpcRequest,
    TopicKind,
    parse_rpc_response,
    parse_state_report,
    parse_topic,
    rpc_request_topic,
    rpc_response_topic,
    state_topic,
    telemetry_topic,
)
from devtools.management.commands.device_simulator import parse_fault
from devtools.simulator import DeviceSimulator, FaultMode, SimulatedDevice

WAIT_S = 5.0
SENTINEL = "sentinel"


@dataclass(frozen=True)
class Received:
    serial: str
    kind: TopicKind
    doc: dict
    at: float


class Backend:
    """The backend's half of the contract: sends requests, records every reply in order."""

    def __init__(self, client_factory, serials: list[str]) -> None:
        self._cond = threading.Condition()
        self._messages: list[Received] = []
        topics = [
            helper(serial)
            for serial in serials
            for helper in (rpc_response_topic, state_topic, telemetry_topic)
        ]
        self.client = client_factory(subscribe=topics, on_message=self._on_message)

    def _on_message(self, client, userdata, message) -> None:
        serial, kind = parse_topic(message.topic)
        with self._cond:
            self._messages.append(
                Received(serial, kind, json.loads(message.payload), time.monotonic())
            )
            self._cond.notify_all()

    def send(self, serial: str, command_id: str, params: dict, method: str = "setIO") -> float:
        now, sent = datetime.now(UTC), time.monotonic()
        request = RpcRequest(command_id, method, params, now, now + timedelta(seconds=10))
        self.send_raw(serial, request.to_json())
        return sent

    def send_raw(self, serial: str, payload: bytes) -> None:
        self.client.publish(rpc_request_topic(serial), payload, qos=1).wait_for_publish(WAIT_S)

    def received(self, serial: str, kind: TopicKind, command_id: str | None = None) -> list[dict]:
        with self._cond:
            return [
                m.doc
                for m in self._messages
                if m.serial == serial
                and m.kind == kind
                and (command_id is None or m.doc.get("commandId") == command_id)
            ]

    def wait_for(
        self, serial: str, kind: TopicKind, command_id: str | None = None, count: int = 1
    ) -> list[Received]:
        def matching() -> list[Received]:
            return [
                m
                for m in self._messages
                if m.serial == serial
                and m.kind == kind
                and (command_id is None or m.doc.get("commandId") == command_id)
            ]

        with self._cond:
            if not self._cond.wait_for(lambda: len(matching()) >= count, WAIT_S):
                raise AssertionError(
                    f"{count} {kind} from {serial} ({command_id}) not received; "
                    f"got {len(matching())}"
                )
            return matching()

    def kinds_in_order(self, serial: str, command_id: str) -> list[TopicKind]:
        with self._cond:
            return [
                m.kind
                for m in self._messages
                if m.serial == serial
                and m.kind != TopicKind.TELEMETRY
                and m.doc.get("commandId") == command_id
            ]

    def barrier(self, sentinel: str) -> None:
        """Everything the simulator published before now has arrived: it answers in order,
        so once a fresh request to a healthy device is acked, earlier replies are in."""
        command_id = f"barrier-{uuid.uuid4().hex[:8]}"
        self.send(sentinel, command_id, {"io1": True})
        self.wait_for(sentinel, TopicKind.RPC_RESPONSE, command_id)


def eventually(condition: Callable[[], bool], timeout_s: float = WAIT_S) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached in time")
        time.sleep(0.01)


@pytest.fixture
def run_id() -> str:
    return uuid.uuid4().hex[:8]


@pytest.fixture
def fleet(mqtt_config, mqtt_client_factory, run_id) -> Iterator[Callable[..., tuple]]:
    """Start a simulator with the given devices plus a healthy sentinel, and a backend
    subscribed to all of them. Serials are unique per test: the broker may be shared."""
    started: list[DeviceSimulator] = []

    def make(*devices: SimulatedDevice, **options) -> tuple[DeviceSimulator, Backend, str]:
        sentinel = SimulatedDevice(f"{SENTINEL}-{run_id}", {"io1": False})
        simulator = DeviceSimulator(
            [*devices, sentinel], config=mqtt_config, client_id=f"sim-{run_id}", **options
        )
        simulator.start()
        started.append(simulator)
        backend = Backend(mqtt_client_factory, simulator.serials)
        return simulator, backend, sentinel.serial

    yield make
    for simulator in started:
        simulator.stop()


def device(run_id: str, name: str = "dev", **fault) -> SimulatedDevice:
    return SimulatedDevice(f"SIM-{run_id}-{name}", {"temp": 20.0, "io1": False}, **fault)


# -- the healthy contract ----------------------------------------------------------------


def test_a_request_is_applied_once_acked_then_state_reported(fleet, run_id):
    simulator, backend, _ = fleet(device(run_id))
    serial = f"SIM-{run_id}-dev"

    backend.send(serial, "cmd_1", {"io1": True})

    ack = backend.wait_for(serial, TopicKind.RPC_RESPONSE, "cmd_1")[0].doc
    state = backend.wait_for(serial, TopicKind.STATE, "cmd_1")[0].doc
    assert parse_rpc_response(json.dumps(ack).encode()).accepted
    assert ack == {"commandId": "cmd_1", "status": "accepted", "resultCode": "ok", "message": None}
    report = parse_state_report(json.dumps(state).encode())
    assert report.reported_state == {"io1": True}
    assert backend.kinds_in_order(serial, "cmd_1") == [TopicKind.RPC_RESPONSE, TopicKind.STATE]
    telemetry = backend.wait_for(serial, TopicKind.TELEMETRY)[0].doc
    assert telemetry["values"] == {"temp": 20.0, "io1": True}
    assert simulator.applies[serial, "cmd_1"] == 1
    assert simulator.values_of(serial) == {"temp": 20.0, "io1": True}


def test_a_repeated_command_id_is_acked_every_time_and_applied_once(fleet, run_id):
    simulator, backend, _ = fleet(device(run_id))
    serial = f"SIM-{run_id}-dev"

    for _ in range(3):
        backend.send(serial, "cmd_1", {"temp": 25.5})
    backend.wait_for(serial, TopicKind.RPC_RESPONSE, "cmd_1", count=3)
    states = backend.wait_for(serial, TopicKind.STATE, "cmd_1", count=3)

    assert {json.dumps(s.doc, sort_keys=True) for s in states} == {
        json.dumps(states[0].doc, sort_keys=True)
    }  # replayed byte for byte, not re-applied
    assert simulator.requests[serial, "cmd_1"] == 3
    assert simulator.applies[serial, "cmd_1"] == 1
    assert len(backend.received(serial, TopicKind.TELEMETRY)) == 1  # only the apply reports


def test_a_new_value_after_a_repeat_is_a_new_command(fleet, run_id):
    simulator, backend, _ = fleet(device(run_id))
    serial = f"SIM-{run_id}-dev"
    backend.send(serial, "cmd_1", {"io1": True})
    backend.send(serial, "cmd_1", {"io1": False})  # same id, other value: still a repeat
    backend.send(serial, "cmd_2", {"io1": False})
    backend.wait_for(serial, TopicKind.STATE, "cmd_2")

    assert simulator.applies == {(serial, "cmd_1"): 1, (serial, "cmd_2"): 1}
    assert simulator.values_of(serial)["io1"] is False


@pytest.mark.parametrize(
    "params, code",
    [
        ({"valve9": True}, "not_supported"),
        ({"io1": 1}, "invalid_param"),
        ({"temp": "hot"}, "invalid_param"),
        ({}, "invalid_param"),
    ],
)
def test_an_unusable_request_is_rejected_and_changes_nothing(fleet, run_id, params, code):
    simulator, backend, sentinel = fleet(device(run_id))
    serial = f"SIM-{run_id}-dev"
    backend.send(serial, "cmd_1", params)

    ack = backend.wait_for(serial, TopicKind.RPC_RESPONSE, "cmd_1")[0].doc
    assert (ack["status"], ack["resultCode"]) == ("rejected", code)
    backend.barrier(sentinel)
    assert backend.received(serial, TopicKind.STATE) == []
    assert simulator.applies[serial, "cmd_1"] == 0
    assert simulator.values_of(serial) == {"temp": 20.0, "io1": False}


def test_malformed_requests_are_counted_and_ignored(fleet, run_id):
    simulator, backend, _ = fleet(device(run_id))
    serial = f"SIM-{run_id}-dev"
    backend.send_raw(serial, b"\xff\xfe not utf-8")
    backend.send_raw(serial, b'{"commandId": "cmd_1"}')
    backend.send_raw(serial, b"[1, 2]")

    backend.send(serial, "cmd_ok", {"io1": True})
    backend.wait_for(serial, TopicKind.RPC_RESPONSE, "cmd_ok")
    assert simulator.malformed == 3
    assert simulator.malformed_by_reason == {
        "invalid_encoding": 1,
        "missing_field": 1,
        "not_an_object": 1,
    }
    assert backend.received(serial, TopicKind.RPC_RESPONSE, "cmd_1") == []
    assert simulator.stats().errors == 0


def test_telemetry_on_demand_and_periodically(fleet, run_id):
    simulator, backend, sentinel = fleet(device(run_id), telemetry_interval_s=0.1)
    serial = f"SIM-{run_id}-dev"
    ts = datetime(2025, 3, 1, 8, 30, tzinfo=UTC)

    assert simulator.publish_telemetry(serial, {"temp": 35.0}, ts=ts)

    eventually(
        lambda: any(
            m["ts"] == "2025-03-01T08:30:00Z" for m in backend.received(serial, TopicKind.TELEMETRY)
        )
    )
    pushed = [
        m
        for m in backend.received(serial, TopicKind.TELEMETRY)
        if m["ts"] == "2025-03-01T08:30:00Z"
    ]
    assert pushed == [{"ts": "2025-03-01T08:30:00Z", "values": {"temp": 35.0, "io1": False}}]
    backend.wait_for(sentinel, TopicKind.TELEMETRY, count=2)  # every device, on its own
    assert simulator.values_of(serial)["temp"] == 35.0


# -- fault modes -------------------------------------------------------------------------


def test_drop_ack_twice_answers_only_the_third_request_and_applies_once(fleet, run_id):
    simulator, backend, sentinel = fleet(device(run_id, fault="drop_ack", fault_times=2))
    serial = f"SIM-{run_id}-dev"

    for attempt in (1, 2):
        backend.send(serial, "cmd_1", {"io1": True})
        backend.barrier(sentinel)
        assert backend.received(serial, TopicKind.RPC_RESPONSE) == [], attempt
        assert backend.received(serial, TopicKind.STATE) == [], attempt
    backend.send(serial, "cmd_1", {"io1": True})

    ack = backend.wait_for(serial, TopicKind.RPC_RESPONSE, "cmd_1")[0].doc
    state = backend.wait_for(serial, TopicKind.STATE, "cmd_1")[0].doc
    assert ack["status"] == "accepted"
    assert state["reportedState"] == {"io1": True}
    assert simulator.requests[serial, "cmd_1"] == 3
    assert simulator.applies[serial, "cmd_1"] == 1


def test_delay_ack_answers_late_without_holding_up_other_devices(fleet, run_id):
    simulator, backend, _ = fleet(
        device(run_id, fault="delay_ack", delay_s=0.4), device(run_id, "fast")
    )
    slow, fast = f"SIM-{run_id}-dev", f"SIM-{run_id}-fast"

    sent = backend.send(slow, "cmd_slow", {"io1": True})
    backend.send(fast, "cmd_fast", {"io1": True})

    fast_ack = backend.wait_for(fast, TopicKind.RPC_RESPONSE, "cmd_fast")[0]
    slow_ack = backend.wait_for(slow, TopicKind.RPC_RESPONSE, "cmd_slow")[0]
    backend.wait_for(slow, TopicKind.STATE, "cmd_slow")
    assert fast_ack.at < slow_ack.at
    assert slow_ack.at - sent >= 0.4
    assert simulator.applies[slow, "cmd_slow"] == 1


def test_duplicate_ack_sends_every_ack_and_state_twice_but_applies_once(fleet, run_id):
    simulator, backend, sentinel = fleet(device(run_id, fault="duplicate_ack"))
    serial = f"SIM-{run_id}-dev"
    backend.send(serial, "cmd_1", {"io1": True})

    acks = backend.wait_for(serial, TopicKind.RPC_RESPONSE, "cmd_1", count=2)
    states = backend.wait_for(serial, TopicKind.STATE, "cmd_1", count=2)
    backend.barrier(sentinel)
    assert len(backend.received(serial, TopicKind.RPC_RESPONSE)) == 2
    assert acks[0].doc == acks[1].doc and states[0].doc == states[1].doc
    assert simulator.applies[serial, "cmd_1"] == 1


def test_never_apply_acks_but_changes_and_reports_nothing(fleet, run_id):
    simulator, backend, sentinel = fleet(device(run_id, fault="never_apply"))
    serial = f"SIM-{run_id}-dev"
    backend.send(serial, "cmd_1", {"io1": True})

    ack = backend.wait_for(serial, TopicKind.RPC_RESPONSE, "cmd_1")[0].doc
    backend.barrier(sentinel)
    assert ack["status"] == "accepted"
    assert backend.received(serial, TopicKind.STATE) == []
    assert simulator.applies[serial, "cmd_1"] == 0
    assert simulator.values_of(serial)["io1"] is False


def test_wrong_value_applies_and_reports_something_else(fleet, run_id):
    simulator, backend, _ = fleet(device(run_id, fault="wrong_value"))
    serial = f"SIM-{run_id}-dev"
    backend.send(serial, "cmd_1", {"io1": True, "temp": 25.0})

    state = backend.wait_for(serial, TopicKind.STATE, "cmd_1")[0].doc
    assert state["reportedState"] == {"io1": False, "temp": 26.0}
    assert simulator.values_of(serial) == {"io1": False, "temp": 26.0}
    assert simulator.applies[serial, "cmd_1"] == 1


@pytest.mark.parametrize("code", ["busy", "hardware_fault"])
def test_reject_answers_with_the_result_code_and_changes_nothing(fleet, run_id, code):
    simulator, backend, _ = fleet(device(run_id, fault="reject", reject_code=code))
    serial = f"SIM-{run_id}-dev"
    backend.send(serial, "cmd_1", {"io1": True})

    ack = backend.wait_for(serial, TopicKind.RPC_RESPONSE, "cmd_1")[0].doc
    assert (ack["status"], ack["resultCode"]) == ("rejected", code)
    assert simulator.applies[serial, "cmd_1"] == 0
    assert simulator.values_of(serial)["io1"] is False


def test_busy_once_then_the_retry_is_applied(fleet, run_id):
    simulator, backend, _ = fleet(device(run_id, fault=FaultMode.REJECT, fault_times=1))
    serial = f"SIM-{run_id}-dev"
    backend.send(serial, "cmd_1", {"io1": True})
    backend.wait_for(serial, TopicKind.RPC_RESPONSE, "cmd_1")
    backend.send(serial, "cmd_1", {"io1": True})

    acks = backend.wait_for(serial, TopicKind.RPC_RESPONSE, "cmd_1", count=2)
    assert [a.doc["resultCode"] for a in acks] == ["busy", "ok"]
    backend.wait_for(serial, TopicKind.STATE, "cmd_1")
    assert simulator.applies[serial, "cmd_1"] == 1


def test_offline_ignores_requests_and_telemetry_during_the_window(fleet, run_id):
    simulator, backend, sentinel = fleet(
        device(run_id, fault="offline", offline_s=0.5, fault_times=1)
    )
    serial = f"SIM-{run_id}-dev"

    backend.send(serial, "cmd_1", {"io1": True})  # takes the device off the air
    eventually(lambda: not simulator.is_online(serial))
    backend.send(serial, "cmd_1", {"io1": True})  # a retry inside the window
    assert simulator.publish_telemetry(serial, {"temp": 30.0}) is False
    backend.barrier(sentinel)
    assert backend.received(serial, TopicKind.RPC_RESPONSE) == []
    assert backend.received(serial, TopicKind.TELEMETRY) == []
    assert simulator.stats().ignored_offline == 2

    eventually(lambda: simulator.is_online(serial), timeout_s=2.0)
    backend.send(serial, "cmd_1", {"io1": True})  # the device is back: applied once
    backend.wait_for(serial, TopicKind.STATE, "cmd_1")
    assert simulator.requests[serial, "cmd_1"] == 3
    assert simulator.applies[serial, "cmd_1"] == 1


def test_a_fault_can_be_changed_while_running(fleet, run_id):
    simulator, backend, _ = fleet(device(run_id))
    serial = f"SIM-{run_id}-dev"
    simulator.set_fault(serial, "reject", reject_code="hardware_fault")
    backend.send(serial, "cmd_1", {"io1": True})
    assert backend.wait_for(serial, TopicKind.RPC_RESPONSE)[0].doc["resultCode"] == "hardware_fault"

    simulator.set_fault(serial, FaultMode.NONE)
    backend.send(serial, "cmd_1", {"io1": True})
    backend.wait_for(serial, TopicKind.STATE, "cmd_1")
    assert simulator.applies[serial, "cmd_1"] == 1


def test_a_burst_of_commands_to_many_devices_is_applied_exactly_once_each(fleet, run_id):
    devices = [device(run_id, f"d{i}") for i in range(10)]
    simulator, backend, _ = fleet(*devices)
    for round_ in range(5):
        for d in devices:
            backend.send(d.serial, f"cmd_{round_}", {"temp": float(round_)})
            backend.send(d.serial, f"cmd_{round_}", {"temp": float(round_)})  # redelivery

    for d in devices:
        backend.wait_for(d.serial, TopicKind.RPC_RESPONSE, "cmd_4", count=2)
    applies = simulator.applies
    assert sorted(set(applies.values())) == [1]
    assert len(applies) == 50
    assert all(simulator.values_of(d.serial)["temp"] == 4.0 for d in devices)


def test_the_device_definition_is_checked():
    with pytest.raises(ValueError):
        SimulatedDevice("bad/serial", {})
    with pytest.raises(ValueError):
        SimulatedDevice("SIM-1", {}, fault="melt")
    with pytest.raises(ValueError):
        SimulatedDevice("SIM-1", {}, fault="reject", reject_code="ok")
    with pytest.raises(ValueError):
        DeviceSimulator([SimulatedDevice("SIM-1", {}), SimulatedDevice("SIM-1", {})])


# -- the management command ----------------------------------------------------------------


def test_fault_specs_parse_into_mode_and_times():
    assert parse_fault("drop_ack:2") == (None, FaultMode.DROP_ACK, 2)
    assert parse_fault("SIM-0003=reject") == ("SIM-0003", FaultMode.REJECT, None)
    for bad in ("melt", "drop_ack:0", "drop_ack:x"):
        with pytest.raises(CommandError):
            parse_fault(bad)


def test_the_command_runs_a_fleet_for_its_duration_and_prints_a_table(mqtt_config, run_id):
    out = io.StringIO()
    call_command(
        "device_simulator",
        "--serials",
        f"CMD-{run_id}-a,CMD-{run_id}-b",
        "--fault",
        f"CMD-{run_id}-b=drop_ack:1",
        "--telemetry-interval",
        "0.1",
        "--duration",
        "0.3",
        "--progress-interval",
        "0.1",
        "--client-id",
        f"cmd-{run_id}",
        stdout=out,
    )
    text = out.getvalue()
    assert "requests=0" in text
    assert f"CMD-{run_id}-b  drop_ack:1" in text
    assert text.rstrip().splitlines()[-1].startswith("total")
