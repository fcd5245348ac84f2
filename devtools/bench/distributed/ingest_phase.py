"""Ingest through the deployed processes (the broker, the bridge process, which commits
what it receives) next to its floors on the same broker and database: a bare paho QoS 1 subscriber
and bare batched INSERTs of the same rows (``devtools.bench.ingest``)."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import paho.mqtt.client as paho

from automation.models import AutomationEndpointEvent
from automation.states import EventStatus
from devices.models import Telemetry
from devices.mqtt.contract import telemetry_topic
from devices.mqtt.messages import InboundTelemetry
from devtools.bench import BenchError
from devtools.bench.distributed.procs import CpuMeter
from devtools.bench.distributed.results import ratios_table
from devtools.bench.distributed.stack import Stack
from devtools.bench.distributed.warmup import fleet_online
from devtools.bench.fleet import SENSOR_KEYS, BenchFleet, fleet_readings_delete
from devtools.bench.ingest import (
    BARE_INSERT,
    BARE_PAHO,
    ingest_bare_insert_seconds,
    ingest_bare_subscriber_seconds,
    telemetry_messages,
)
from devtools.bench.mqtt import QOS, bench_publisher, client_close
from devtools.bench.report import Progress

PRODUCT = "broker → bridge process → committed"
# Published but not yet persisted: the bridge's persistent session holds them on the broker,
# well inside the deployed max_queued_messages (deploy/mosquitto.conf: 100,000).
WINDOW = 10_000
COUNT_EVERY_S = 0.1
STALL_S = 60.0
Write = Callable[[str], None]


@dataclass
class IngestFigures:
    messages: int
    seconds: dict[str, float] = field(default_factory=dict)
    cpu: dict[str, float] = field(default_factory=dict)  # over the product path

    def rate(self, path: str) -> float:
        return self.messages / self.seconds[path] if path in self.seconds else float("nan")

    def table(self) -> str:
        rows = [
            (PRODUCT, self.rate(PRODUCT), floor, self.rate(floor))
            for floor in (BARE_PAHO, BARE_INSERT)
            if floor in self.seconds
        ]
        values = self.rate(PRODUCT) * len(SENSOR_KEYS)
        return (
            ratios_table(rows, "msg/s")
            + f"\nproduct: {values:,.0f} values/s ({len(SENSOR_KEYS)} values a message)"
        )

    def as_json(self) -> dict[str, object]:
        return {
            "messages": self.messages,
            "values_per_message": len(SENSOR_KEYS),
            "seconds": {k: round(v, 3) for k, v in self.seconds.items()},
            "msg_per_s": {k: round(self.rate(k), 1) for k in self.seconds},
            "product_values_per_s": round(self.rate(PRODUCT) * len(SENSOR_KEYS), 1),
            "cpu_percent": {k: round(v, 1) for k, v in self.cpu.items()},
        }


def ingest_phase(stack: Stack, fleet: BenchFleet, messages: int, write: Write) -> IngestFigures:
    figures = IngestFigures(messages)
    batch = telemetry_messages(fleet, messages)
    write(f"ingest: {messages:,} messages × {len(SENSOR_KEYS)} values over "
          f"{len(fleet.sensors):,} sensors through the stack")  # fmt: skip
    fleet_online(stack, fleet, write)
    meter = CpuMeter(stack.pids())
    figures.seconds[PRODUCT] = _through_stack(stack, fleet, batch)
    figures.cpu = meter.percent()
    _evaluated_wait(stack, fleet)
    fleet_readings_delete(fleet)
    write("ingest: bare paho QoS 1 subscriber on the same broker")
    figures.seconds[BARE_PAHO] = ingest_bare_subscriber_seconds(fleet, batch, stack.mqtt)
    write("ingest: bare batched INSERT on the same database")
    figures.seconds[BARE_INSERT] = ingest_bare_insert_seconds(batch, 500)
    return figures


def _through_stack(stack: Stack, fleet: BenchFleet, batch: Sequence[InboundTelemetry]) -> float:
    """First publish → every message's Telemetry row committed, publishing at most WINDOW
    ahead of what is persisted."""
    telemetry = Telemetry.objects.filter(device__farm__organization_id=fleet.organization_id)
    if telemetry.exists():
        raise BenchError("the ingest fleet already has telemetry; the count would be wrong")
    total = len(batch)
    persisted = _Persisted(lambda: telemetry.count())
    publisher = bench_publisher(fleet.tag, stack.mqtt)
    progress = Progress("ingest")
    try:
        started = time.perf_counter()
        for sent, message in enumerate(batch):
            while sent - persisted.get() >= WINDOW:
                persisted.wait_change(stack, STALL_S)
            info = publisher.publish(telemetry_topic(message.serial), message.payload, qos=QOS)
            if info.rc != paho.MQTT_ERR_SUCCESS:
                raise BenchError(f"publish refused: {paho.error_string(info.rc)}")
            progress.update(f"{sent + 1:,}/{total:,} published, {persisted.value:,} persisted")
        while persisted.get() < total:
            persisted.wait_change(stack, STALL_S)
            progress.update(f"{persisted.value:,}/{total:,} persisted")
        seconds = time.perf_counter() - started
        progress.update(f"{total:,} persisted in {seconds:.1f}s", final=True)
        return seconds
    finally:
        client_close(publisher)


class _Persisted:
    """The persisted count, read at most every COUNT_EVERY_S."""

    def __init__(self, count: Callable[[], int]) -> None:
        self._count = count
        self.value = 0
        self._read_at = 0.0

    def get(self) -> int:
        if time.monotonic() - self._read_at >= COUNT_EVERY_S:
            self.value, self._read_at = self._count(), time.monotonic()
        return self.value

    def wait_change(self, stack: Stack, stall_s: float) -> None:
        before, since = self.value, time.monotonic()
        while self.get() == before:
            if time.monotonic() - since > stall_s:
                stack.check_alive()
                raise BenchError(f"ingest: nothing persisted for {stall_s:.0f}s at {before:,}")
            time.sleep(COUNT_EVERY_S)


def _evaluated_wait(stack: Stack, fleet: BenchFleet) -> None:
    """Untimed: until evaluation has caught up, so the bare paths run on an idle stack."""
    pending = AutomationEndpointEvent.objects.filter(
        device_instance_endpoint__device__farm__organization_id=fleet.organization_id,
        processing_status=EventStatus.PENDING,
    )
    progress = Progress("ingest")
    deadline = time.monotonic() + STALL_S * 5
    while left := pending.count():
        if time.monotonic() > deadline:
            raise BenchError(f"ingest: {left:,} events still not evaluated")
        stack.check_alive()
        progress.update(f"draining: {left:,} events still to evaluate")
        time.sleep(0.5)
    progress.update("drained", final=True)
