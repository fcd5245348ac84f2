"""Command latency at a fixed offered rate: a reading crossing a rule's threshold → the RPC
request reaching the device, and → the command applied (the device's state report
reconciled), p50/p99, next to a bare paho request/response round trip on the same broker at
the same rate. The bare round trip carries the broker's own latency (on a broker without
TCP_NODELAY, Nagle's ~40 ms), so the ratio is what the pipeline adds on top of it."""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass
from datetime import UTC, datetime

from automation.models import AutomationEndpointEvent, DeviceCommand
from automation.states import COMMAND_LIVE, CommandStatus, EventStatus
from config.env import MqttConfig
from config.tables import format_table
from devices.models import Telemetry
from devtools.bench.fleet import COLD_C, HOT_C, BenchFleet
from devtools.bench.mqtt import RpcObserver, bare_round_trips_ms, sleep_until
from devtools.bench.report import Figure, Progress, percentile, ratio
from devtools.simulator import DeviceSimulator, SimulatedDevice

TO_RPC = "telemetry → RPC request at the device"
TO_APPLIED = "telemetry → applied (state reconciled)"
BARE_RTT = "bare paho request → response"
HOT_READING_C, COLD_READING_C = HOT_C + 5.0, COLD_C - 8.0
SETTLE_TIMEOUT_S = 60.0  # after the last reading; covers one ack timeout and its retry
POLL_S = 0.2


@dataclass
class CommandResult:
    """Latency samples (ms) per path and the final status of every command."""

    farms: int
    readings: int
    rate: float
    samples: dict[str, list[float]]
    outcomes: Counter[str]

    def figures(self) -> list[Figure]:
        return [
            Figure(f"command: {path} {name}", percentile(ms, q), "ms", False)
            for path, ms in self.samples.items()
            for name, q in (("p50", 0.5), ("p99", 0.99))
        ]

    def table(self) -> str:
        bare = self.samples.get(BARE_RTT, [])
        rows = []
        for path, ms in self.samples.items():
            p50, p99 = percentile(ms, 0.5), percentile(ms, 0.99)
            rows.append(
                (
                    path,
                    len(ms),
                    p50,
                    p99,
                    ratio(p50, percentile(bare, 0.5)),
                    ratio(p99, percentile(bare, 0.99)),
                )
            )
        headers = ["path", "samples", "p50 ms", "p99 ms", "p50 × bare", "p99 × bare"]
        return format_table(headers, rows)

    def summary(self) -> str:
        made = sum(self.outcomes.values())
        states = ", ".join(f"{status} {n}" for status, n in sorted(self.outcomes.items()))
        return (
            f"{self.readings:,} readings offered at {self.rate:g}/s over {self.farms:,} farms"
            f" → {made:,} commands: {states or 'none'}"
        )


def command_bench(
    *, fleet: BenchFleet, readings: int, rate: float, config: MqttConfig
) -> CommandResult:
    """Offer ``readings`` threshold-crossing readings at ``rate``/s to a running pipeline
    (``pipeline_running``), measure every command they make, then the bare round trip.
    The fleet (one sensor and relay per farm, ``fleet_seeded``) is the caller's."""
    devices = [SimulatedDevice(s, {"temp": 20.0, "humidity": 50.0}) for s in fleet.sensors]
    devices += [SimulatedDevice(r, {"io1": False}) for r in fleet.relays]
    simulator = DeviceSimulator(devices, config=config, client_id=f"bench-sim-{fleet.tag}")
    observer = RpcObserver(config, fleet.tag, fleet.serial_prefix)
    try:
        simulator.start()
        _offer(simulator, fleet, readings, rate)
        _settle(fleet, readings)
    finally:
        simulator.stop()
        observer.close()
    samples, outcomes = _latencies(fleet, observer.first_seen)
    samples[BARE_RTT] = bare_round_trips_ms(config, fleet.tag, readings, rate, SETTLE_TIMEOUT_S)
    return CommandResult(len(fleet.relays), readings, rate, samples, outcomes)


def _offer(simulator: DeviceSimulator, fleet: BenchFleet, count: int, rate: float) -> None:
    """Publish ``count`` readings at ``rate``/s round-robin over the farms, each on the other
    side of the thresholds from its farm's previous one. A reading's ``ts`` is its publish
    time, so every latency is measured from the reading's own timestamp."""
    progress = Progress("command path")
    started = time.perf_counter()
    farms = len(fleet.sensors)
    for i in range(count):
        sleep_until(started + i / rate)
        hot = (i // farms) % 2 == 0
        temp = HOT_READING_C if hot else COLD_READING_C
        simulator.publish_telemetry(fleet.sensors[i % farms], {"temp": temp}, ts=datetime.now(UTC))
        progress.count(i + 1, count, "readings offered")


def _settle(fleet: BenchFleet, count: int) -> None:
    """Wait until every reading is stored and evaluated and no command is live, or for
    SETTLE_TIMEOUT_S; what is still live then is reported as such, not waited for."""
    org = fleet.organization_id
    readings = Telemetry.objects.filter(device__serial_number__in=fleet.sensors)
    pending = AutomationEndpointEvent.objects.filter(
        device_instance_endpoint__device__farm__organization_id=org,
        processing_status=EventStatus.PENDING,
    )
    live = DeviceCommand.objects.filter(rule__farm__organization_id=org, status__in=COMMAND_LIVE)
    progress = Progress("command path")
    deadline = time.monotonic() + SETTLE_TIMEOUT_S
    while time.monotonic() < deadline:
        stored, waiting = readings.count(), live.count()
        progress.update(f"{stored:,}/{count:,} readings stored, {waiting} command(s) live")
        if stored >= count and not waiting and not pending.exists():
            break
        time.sleep(POLL_S)
    progress.update("settled", final=True)


def _latencies(
    fleet: BenchFleet, rpc_seen: dict[str, datetime]
) -> tuple[dict[str, list[float]], Counter[str]]:
    rows = DeviceCommand.objects.filter(
        rule__farm__organization_id=fleet.organization_id
    ).values_list(
        "device_command_id", "status", "applied_at", "rule_execution__event__event_timestamp"
    )
    to_rpc: list[float] = []
    to_applied: list[float] = []
    outcomes: Counter[str] = Counter()
    for command_id, status, applied_at, reading_at in rows:
        outcomes[status if status not in COMMAND_LIVE else f"{status} (still live)"] += 1
        seen = rpc_seen.get(command_id or "")
        if seen is not None:
            to_rpc.append((seen - reading_at).total_seconds() * 1000)
        if status == CommandStatus.APPLIED and applied_at is not None:
            to_applied.append((applied_at - reading_at).total_seconds() * 1000)
    return {TO_RPC: to_rpc, TO_APPLIED: to_applied}, outcomes
