"""Ingest throughput on the configured database, next to a bare batched INSERT of the same
rows in the same run, so the figure is read as a ratio to what the database can do."""

from __future__ import annotations

import json
import sys
import time
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

from django.core.management.base import BaseCommand, CommandParser
from django.db import connection, transaction

from automation.keys import event_dedupe_key, telemetry_fingerprint
from config.tables import format_table
from devices.models import (
    Device,
    DeviceInstanceEndpoint,
    DeviceProfile,
    DeviceProfileEndpoint,
    Farm,
    Organization,
)
from devices.services import InboundTelemetry, telemetry_ingest

KEYS = ("temp", "humidity", "soil", "light")


class Command(BaseCommand):
    help = "Measure endpoint values/s through telemetry_ingest vs bare batched INSERTs."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--devices", type=int, default=200)
        parser.add_argument("--messages", type=int, default=10_000)
        parser.add_argument("--batch", type=int, default=500, help="messages per ingest batch")

    def handle(self, *args: Any, **opts: Any) -> None:
        tag = uuid.uuid4().hex[:8]
        org = self._seed(tag, opts["devices"])
        try:
            messages = self._messages(tag, opts["devices"], opts["messages"])
            values = len(messages) * len(KEYS)
            service_s = self._run_service(messages, opts["batch"])
            bare_s = self._run_bare(messages, opts["batch"])
        finally:
            self._cleanup(org)
        rows = [
            (
                "telemetry_ingest (service)",
                values,
                service_s,
                values / service_s,
                f"{bare_s / service_s:.2f}×",
            ),
            ("bare batched INSERT", values, bare_s, values / bare_s, "1.00×"),
        ]
        self.stdout.write(
            f"\ndatabase: {connection.vendor}, {len(messages):,} messages × "
            f"{len(KEYS)} values, batches of {opts['batch']} messages"
        )
        self.stdout.write(
            format_table(["path", "values", "seconds", "values/s", "speed vs bare"], rows)
        )

    def _seed(self, tag: str, n: int) -> Organization:
        org = Organization.objects.create(name=f"bench-{tag}")
        farm = Farm.objects.create(organization=org, name="bench")
        profile = DeviceProfile.objects.create(name=f"bench-{tag}")
        endpoints = [
            DeviceProfileEndpoint.objects.create(profile=profile, key=k, data_type="number")
            for k in KEYS
        ]
        devices = Device.objects.bulk_create(
            [Device(farm=farm, profile=profile, serial_number=f"B{tag}-{i}") for i in range(n)]
        )
        DeviceInstanceEndpoint.objects.bulk_create(
            [
                DeviceInstanceEndpoint(device=d, profile_endpoint=e)
                for d in devices
                for e in endpoints
            ]
        )
        return org

    def _messages(self, tag: str, devices: int, count: int) -> list[InboundTelemetry]:
        start = datetime(2026, 1, 1, tzinfo=UTC)
        received = datetime.now(UTC)
        out = []
        for i in range(count):
            ts = (start + timedelta(seconds=i)).isoformat().replace("+00:00", "Z")
            values = {k: round(20 + (i * 7 + j) % 100 / 10, 1) for j, k in enumerate(KEYS)}
            payload = json.dumps({"ts": ts, "values": values})
            out.append(InboundTelemetry(f"B{tag}-{i % devices}", payload, received))
        return out

    def _progress(self, label: str, done: int, total: int) -> None:
        sys.stderr.write(f"\r{label}: {done:,}/{total:,} messages")
        if done == total:
            sys.stderr.write("\n")

    def _run_service(self, messages: list[InboundTelemetry], batch: int) -> float:
        started = time.perf_counter()
        for i in range(0, len(messages), batch):
            telemetry_ingest(messages=messages[i : i + batch])
            self._progress("service", min(i + batch, len(messages)), len(messages))
        return time.perf_counter() - started

    def _run_bare(self, messages: list[InboundTelemetry], batch: int) -> float:
        """The same telemetry and event rows, precomputed, inserted with plain multi-row SQL."""
        with connection.cursor() as cur:
            cur.execute("DROP TABLE IF EXISTS bench_bare_telemetry")
            cur.execute("DROP TABLE IF EXISTS bench_bare_event")
            cur.execute(
                "CREATE TABLE bench_bare_telemetry (device TEXT, raw TEXT, fp TEXT, "
                "ts TEXT, received TEXT)"
            )
            cur.execute(
                "CREATE TABLE bench_bare_event (device TEXT, endpoint TEXT, ts TEXT, "
                "value TEXT, dedupe TEXT UNIQUE, status TEXT)"
            )
        started = time.perf_counter()
        try:
            for i in range(0, len(messages), batch):
                self._bare_batch(messages[i : i + batch])
                self._progress("bare   ", min(i + batch, len(messages)), len(messages))
            return time.perf_counter() - started
        finally:
            with connection.cursor() as cur:
                cur.execute("DROP TABLE bench_bare_telemetry")
                cur.execute("DROP TABLE bench_bare_event")

    def _bare_batch(self, chunk: list[InboundTelemetry]) -> None:
        tel: list[tuple[str, ...]] = []
        ev: list[tuple[str, ...]] = []
        for m in chunk:
            body = json.loads(m.payload)
            fp = telemetry_fingerprint(m.payload)
            ts = datetime.fromisoformat(body["ts"])
            tel.append((m.serial, m.payload, fp, body["ts"], m.received_at.isoformat()))
            for j, (key, value) in enumerate(body["values"].items()):
                dedupe = event_dedupe_key(
                    device_id=0, endpoint_id=j, event_ts=ts, value=value, fingerprint=fp
                )
                ev.append((m.serial, key, body["ts"], json.dumps(value), dedupe, "pending"))
        with transaction.atomic(), connection.cursor() as cur:
            _insert_many(cur, "bench_bare_telemetry", 5, tel)
            _insert_many(cur, "bench_bare_event", 6, ev)

    def _cleanup(self, org: Organization) -> None:
        from automation.models import AutomationEndpointEvent
        from devices.models import Telemetry

        farm_ids = list(org.farms.values_list("pk", flat=True))
        AutomationEndpointEvent.objects.filter(farm_id__in=farm_ids).delete()
        Telemetry.objects.filter(device__farm_id__in=farm_ids).delete()
        profiles = set(
            Device.objects.filter(farm_id__in=farm_ids).values_list("profile", flat=True)
        )
        Device.objects.filter(farm_id__in=farm_ids).delete()
        DeviceProfile.objects.filter(pk__in=profiles).delete()
        Farm.objects.filter(pk__in=farm_ids).delete()
        org.delete()


def _insert_many(cur: Any, table: str, width: int, rows: list[tuple[str, ...]]) -> None:
    """Multi-row VALUES in chunks that stay under SQLite's bound-parameter limit."""
    per = max(1, 30_000 // width)
    for i in range(0, len(rows), per):
        part = rows[i : i + per]
        marks = ",".join(["(" + ",".join(["%s"] * width) + ")"] * len(part))
        cur.execute(f"INSERT INTO {table} VALUES {marks}", [v for r in part for v in r])
