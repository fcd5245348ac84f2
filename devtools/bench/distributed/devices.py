"""The device side of the command-path phase, in the bench process: the simulator's sensors
and relays on one MQTT client, noting when each RPC request reaches its relay, and the loop
that offers the scheduled crossings at their times."""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from time import perf_counter

from config.env import MqttConfig
from devices.mqtt.contract import ContractError, parse_rpc_request
from devtools.bench.distributed.schedule import Crossing
from devtools.bench.fleet import COLD_C, HOT_C, RELAY_KEY, BenchFleet
from devtools.bench.mqtt import sleep_until
from devtools.bench.report import Progress
from devtools.simulator import DeviceSimulator, SimulatedDevice

HOT_READING_C, COLD_READING_C = HOT_C + 5.0, COLD_C - 8.0


class TimedSimulator(DeviceSimulator):
    """The simulator's devices, unchanged, plus the time each commandId first reached its
    device: the device-side end of "reading → RPC request"."""

    def __init__(self, fleet: BenchFleet, config: MqttConfig) -> None:
        devices = [SimulatedDevice(s, {"temp": 20.0}) for s in fleet.sensors]
        devices += [SimulatedDevice(r, {RELAY_KEY: False}) for r in fleet.relays]
        super().__init__(devices, config=config, client_id=f"bench-fleet-{fleet.tag}")
        self.first_seen: dict[str, datetime] = {}

    def _handle_message(self, topic: str, payload: bytes | bytearray) -> None:
        at = datetime.now(UTC)
        with contextlib.suppress(ContractError):  # the simulator counts it as malformed
            self.first_seen.setdefault(parse_rpc_request(payload).command_id, at)
        super()._handle_message(topic, payload)


@dataclass(frozen=True)
class Offered:
    """A crossing as it went out: the reading's serial and timestamp identify its event."""

    crossing: Crossing
    serial: str
    ts: datetime


def crossings_offer(
    simulator: DeviceSimulator, fleet: BenchFleet, crossings: Sequence[Crossing], label: str
) -> tuple[list[Offered], float]:
    """Publish each crossing at its offset; returns what went out and the seconds it took.
    A reading's ``ts`` is its publish time, so latencies start at the reading itself."""
    progress = Progress(label)
    offered: list[Offered] = []
    started = perf_counter()
    for n, crossing in enumerate(crossings, 1):
        sleep_until(started + crossing.offset_s)
        serial = fleet.sensors[crossing.farm]
        ts = datetime.now(UTC)
        temp = HOT_READING_C if crossing.hot else COLD_READING_C
        simulator.publish_telemetry(serial, {"temp": temp}, ts=ts)
        offered.append(Offered(crossing, serial, ts))
        elapsed = perf_counter() - started
        progress.update(f"{n:,}/{len(crossings):,} crossings offered, {elapsed:.1f}s")
    progress.update(f"{len(crossings):,} crossings offered", final=True)
    return offered, perf_counter() - started
