"""Ingest throughput in telemetry messages/s, each path on the same messages in the same run:
through MQTT, the bridge and Celery into persisted rows; through the ingest service alone;
and the floors, a bare paho QoS 1 subscriber on the same broker and bare batched INSERTs of
the same rows. The ratios say what the product costs over the broker and the database."""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from django.db import connection, transaction

from automation.keys import telemetry_fingerprint
from automation.models import AutomationEndpointEvent
from automation.services.ingest import telemetry_ingest
from automation.states import EventStatus
from config.env import MqttConfig
from config.tables import format_table
from devices.models import Telemetry
from devices.mqtt.bridge import MqttBridge
from devices.mqtt.contract import TopicKind, telemetry_topic
from devices.mqtt.messages import InboundTelemetry
from devtools.bench import BenchError
from devtools.bench.fleet import SENSOR_KEYS, BenchFleet, fleet_readings_delete
from devtools.bench.mqtt import (
    bare_subscriber_seconds,
    bench_publisher,
    client_close,
    publish_paced,
)
from devtools.bench.report import Figure, Progress, ratio

BRIDGE = "bridge → Celery → persisted"
SERVICE = "telemetry_ingest (service, no MQTT)"
BARE_PAHO = "bare paho QoS 1 subscriber"
BARE_INSERT = "bare batched INSERT"
FLOORLESS = (BRIDGE, SERVICE)  # the product's paths, each compared with every floor
FLOOR_HEADERS = {BARE_PAHO: "vs bare paho", BARE_INSERT: "vs bare INSERT"}
POLL_S = 0.05
MIN_TIMEOUT_S = 60.0
STALL_S = 30.0  # nothing received for this long: the path is stuck, not slow
SLOWEST_RATE_PER_S = 100.0  # a path slower than this is treated as stuck


@dataclass
class IngestResult:
    """Seconds per path for ``messages`` messages of ``len(SENSOR_KEYS)`` values each."""

    messages: int
    seconds: dict[str, float]

    def rate(self, path: str) -> float:
        return self.messages / self.seconds[path] if path in self.seconds else float("nan")

    def figures(self) -> list[Figure]:
        return [Figure(f"ingest: {p}", self.rate(p), "msg/s", True) for p in self.seconds]

    def table(self) -> str:
        """One ratio column per floor measured; a floor is compared with itself only (paho
        against INSERT says nothing)."""
        floors = [f for f in FLOOR_HEADERS if f in self.seconds]
        rows = [
            (
                path,
                self.messages,
                seconds,
                self.rate(path),
                self.rate(path) * len(SENSOR_KEYS),
                *(
                    ratio(self.rate(path), self.rate(f)) if path in (f, *FLOORLESS) else "-"
                    for f in floors
                ),
            )
            for path, seconds in self.seconds.items()
        ]
        headers = ["path", "messages", "seconds", "msg/s", "values/s"]
        headers += [FLOOR_HEADERS[f] for f in floors]
        return format_table(headers, rows)


def ingest_bench(
    *, fleet: BenchFleet, count: int, batch: int, mqtt: tuple[MqttConfig, MqttBridge] | None
) -> IngestResult:
    """Every ingest path on the fleet's sensors with ``count`` messages; the MQTT paths only
    with ``mqtt`` (the broker and a running pipeline's bridge). Leaves the fleet without
    readings; deleting the fleet is the caller's (``fleet_seeded``)."""
    seconds: dict[str, float] = {}
    messages = telemetry_messages(fleet, count)
    if mqtt is not None:
        seconds[BRIDGE] = ingest_bridge_seconds(fleet, messages, *mqtt)
        _evaluated_wait(fleet, count)  # the next measurement gets an idle worker
        fleet_readings_delete(fleet)  # the service path inserts the same rows again
    seconds[SERVICE] = ingest_service_seconds(messages, batch)
    if mqtt is not None:
        seconds[BARE_PAHO] = ingest_bare_subscriber_seconds(fleet, messages, mqtt[0])
    seconds[BARE_INSERT] = ingest_bare_insert_seconds(messages, batch)
    fleet_readings_delete(fleet)  # the next phase runs on tables without them
    return IngestResult(messages=count, seconds=seconds)


def telemetry_messages(fleet: BenchFleet, count: int) -> list[InboundTelemetry]:
    """``count`` distinct readings round-robin over the fleet's sensors (one value per
    SENSOR_KEYS), each a first delivery, none a duplicate of another; stamped one second apart
    up to now, inside the device-time bounds ingest enforces."""
    received = datetime.now(UTC)
    start = received - timedelta(seconds=count)
    out = []
    for i in range(count):
        ts = (start + timedelta(seconds=i)).isoformat().replace("+00:00", "Z")
        values = {k: round(20 + (i * 7 + j) % 100 / 10, 1) for j, k in enumerate(SENSOR_KEYS)}
        payload = json.dumps({"ts": ts, "values": values})
        out.append(InboundTelemetry(fleet.sensors[i % len(fleet.sensors)], payload, received))
    return out


def _timeout_s(count: int) -> float:
    return max(MIN_TIMEOUT_S, count / SLOWEST_RATE_PER_S)


def ingest_bridge_seconds(
    fleet: BenchFleet, messages: Sequence[InboundTelemetry], config: MqttConfig, bridge: MqttBridge
) -> float:
    """First publish → every message's Telemetry row committed (its events commit in the same
    transaction), with the pipeline of ``pipeline_running`` consuming."""
    total = len(messages)
    telemetry = Telemetry.objects.filter(device__farm__organization_id=fleet.organization_id)
    if telemetry.exists():
        raise BenchError("the fleet already has telemetry; the count would be wrong")
    topics = [(telemetry_topic(m.serial), m.payload.encode()) for m in messages]
    publisher = bench_publisher(fleet.tag, config)
    progress = Progress("bridge ingest")
    try:
        started = time.perf_counter()
        publish_paced(
            publisher, topics, lambda: bridge.stats.received[TopicKind.TELEMETRY], STALL_S
        )
        deadline = started + _timeout_s(total)
        while (done := telemetry.count()) < total:
            progress.count(done, total, "messages persisted")
            if bridge.stats.rate_limited:
                raise BenchError(
                    f"the bridge's flood bound dropped {bridge.stats.rate_limited} message(s): "
                    "give each device fewer messages (more --devices)"
                )
            if time.perf_counter() > deadline:
                raise BenchError(
                    f"bridge ingest: {done:,} of {total:,} persisted in time; "
                    f"bridge: {bridge.stats.summary()}"
                )
            time.sleep(POLL_S)
        seconds = time.perf_counter() - started
        progress.count(total, total, "messages persisted")
        return seconds
    finally:
        client_close(publisher)


def _evaluated_wait(fleet: BenchFleet, count: int) -> None:
    """Untimed: until the worker evaluated every event of the bridge run, so its backlog is
    not charged to the next measurement."""
    pending = AutomationEndpointEvent.objects.filter(
        device_instance_endpoint__device__farm__organization_id=fleet.organization_id,
        processing_status=EventStatus.PENDING,
    )
    progress = Progress("bridge ingest")
    deadline = time.perf_counter() + _timeout_s(count)
    while left := pending.count():
        if time.perf_counter() > deadline:
            raise BenchError(f"bridge ingest: {left:,} events still not evaluated")
        progress.update(f"draining: {left:,} events still to evaluate")
        time.sleep(POLL_S * 4)
    progress.update("drained", final=True)


def ingest_bare_subscriber_seconds(
    fleet: BenchFleet, messages: Sequence[InboundTelemetry], config: MqttConfig
) -> float:
    pairs = [(telemetry_topic(m.serial), m.payload.encode()) for m in messages]
    return bare_subscriber_seconds(config, fleet.tag, pairs, _timeout_s(len(messages)))


def ingest_service_seconds(messages: Sequence[InboundTelemetry], batch: int) -> float:
    """The ingest service called directly in batches, as the ingest task calls it."""
    progress = Progress("ingest service")
    started = time.perf_counter()
    for i in range(0, len(messages), batch):
        telemetry_ingest(messages=messages[i : i + batch])
        progress.count(min(i + batch, len(messages)), len(messages), "messages")
    return time.perf_counter() - started


def ingest_bare_insert_seconds(messages: Sequence[InboundTelemetry], batch: int) -> float:
    """The same telemetry and event rows, precomputed, inserted with plain multi-row SQL."""
    with connection.cursor() as cur:
        cur.execute("DROP TABLE IF EXISTS bench_bare_telemetry")
        cur.execute("DROP TABLE IF EXISTS bench_bare_event")
        binary = "BYTEA" if connection.vendor == "postgresql" else "BLOB"  # the fingerprint's
        cur.execute(
            f"CREATE TABLE bench_bare_telemetry (device TEXT, raw TEXT, fp {binary}, "
            "ts TEXT, received TEXT)"
        )
        cur.execute(
            "CREATE TABLE bench_bare_event (device TEXT, endpoint TEXT, ts TEXT, "
            "value TEXT, dedupe TEXT UNIQUE, status TEXT)"
        )
    progress = Progress("bare INSERT")
    started = time.perf_counter()
    try:
        for i in range(0, len(messages), batch):
            _bare_batch(messages[i : i + batch])
            progress.count(min(i + batch, len(messages)), len(messages), "messages")
        return time.perf_counter() - started
    finally:
        with connection.cursor() as cur:
            cur.execute("DROP TABLE bench_bare_telemetry")
            cur.execute("DROP TABLE bench_bare_event")


def _bare_batch(chunk: Sequence[InboundTelemetry]) -> None:
    tel: list[tuple[str | bytes, ...]] = []
    ev: list[tuple[str, ...]] = []
    for m in chunk:
        body = json.loads(m.payload)
        fp = telemetry_fingerprint(m.payload)
        tel.append((m.serial, m.payload, fp, body["ts"], m.received_at.isoformat()))
        for j, (key, value) in enumerate(body["values"].items()):
            dedupe = f"{fp.hex()}:{j}"  # (message, value): the key, as text in the bare shape
            ev.append((m.serial, key, body["ts"], json.dumps(value), dedupe, "pending"))
    with transaction.atomic(), connection.cursor() as cur:
        _insert_many(cur, "bench_bare_telemetry", 5, tel)
        _insert_many(cur, "bench_bare_event", 6, ev)


def _insert_many(
    cur: Any, table: str, width: int, rows: list[tuple[str | bytes, ...]] | list[tuple[str, ...]]
) -> None:
    """Multi-row VALUES in chunks that stay under SQLite's bound-parameter limit."""
    per = max(1, 30_000 // width)
    for i in range(0, len(rows), per):
        part = rows[i : i + per]
        marks = ",".join(["(" + ",".join(["%s"] * width) + ")"] * len(part))
        cur.execute(f"INSERT INTO {table} VALUES {marks}", [v for r in part for v in r])
