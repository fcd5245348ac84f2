"""Ingest throughput through the ingest service next to a bare batched INSERT of the same rows
in the same run, on the database alone (no broker); ``manage.py bench`` adds the MQTT paths
(bridge → Celery → persisted, a bare paho subscriber). See ``devtools.bench.ingest``."""

from __future__ import annotations

import uuid
from typing import Any

from django.core.management.base import BaseCommand, CommandParser
from django.db import connection

from devtools.bench.fleet import SENSOR_KEYS, fleet_seeded
from devtools.bench.ingest import ingest_bench


class Command(BaseCommand):
    help = "Measure telemetry messages/s through telemetry_ingest vs bare batched INSERTs."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--devices", type=int, default=200)
        parser.add_argument("--messages", type=int, default=10_000)
        parser.add_argument("--batch", type=int, default=500, help="messages per ingest batch")

    def handle(self, *args: Any, **opts: Any) -> None:
        seeded = fleet_seeded(
            tag=uuid.uuid4().hex[:8], farms=1, sensors_per_farm=opts["devices"], relays=False
        )
        with seeded as fleet:
            result = ingest_bench(
                fleet=fleet, count=opts["messages"], batch=opts["batch"], mqtt=None
            )
        self.stdout.write(
            f"\ndatabase: {connection.vendor}, {result.messages:,} messages × "
            f"{len(SENSOR_KEYS)} values, batches of {opts['batch']} messages"
        )
        self.stdout.write(result.table())
