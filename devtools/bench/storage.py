"""``manage.py bench --storage``: what a stored value costs on disk. Four-value messages go
through the ingest service and the evaluation stage, as the ingest task runs them, then the
measured tables are compacted (VACUUM FULL, which also rebuilds their indexes) and sized
before and after, so the figures are the bench's rows alone, next to the raw message text.

PostgreSQL only: SQLite has no per-index sizes and no VACUUM FULL. VACUUM FULL locks each
measured table while it rewrites it: run it on a database of its own.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta

from django.conf import settings
from django.db import connection, models
from django.utils import timezone

from automation.models import AutomationEndpointEvent
from automation.services.evaluate import endpoint_events_evaluate
from automation.services.ingest import telemetry_ingest
from config.tables import format_table
from devices.models import DeviceInstanceEndpoint, Telemetry
from devices.mqtt.messages import InboundTelemetry
from devtools.bench import BenchError
from devtools.bench.fleet import SENSOR_KEYS, BenchFleet, fleet_seeded
from devtools.bench.ingest import telemetry_messages
from devtools.bench.report import Progress
from reminders.models import EndpointMetricSource, MetricAggregate

TARGET_BYTES_PER_VALUE = 150  # telemetry + endpoint events, indexes included
LATENCY = timedelta(milliseconds=40)  # device time to receipt, for the receive times
MEASURED: tuple[type[models.Model], ...] = (Telemetry, AutomationEndpointEvent)
Write = Callable[[str], None]


@dataclass(frozen=True)
class TableSize:
    """One table's bytes after VACUUM FULL: heap (with its TOAST, free-space and visibility
    maps) and each index by name."""

    table: str
    rows: int
    heap: int
    indexes: dict[str, int]

    @property
    def total(self) -> int:
        return self.heap + sum(self.indexes.values())

    def minus(self, before: TableSize) -> TableSize:
        """What this run added: the same table sized before it ran."""
        return TableSize(
            self.table,
            self.rows - before.rows,
            self.heap - before.heap,
            {name: size - before.indexes.get(name, 0) for name, size in self.indexes.items()},
        )


@dataclass(frozen=True)
class StorageResult:
    messages: int
    values: int  # stored values: messages × len(SENSOR_KEYS)
    raw_bytes: int  # the messages' text as received
    tables: list[TableSize]

    @property
    def total(self) -> int:
        return sum(t.total for t in self.tables)

    def per_value(self) -> float:
        return self.total / self.values if self.values else float("nan")

    def table(self) -> str:
        rows: list[tuple[object, ...]] = []
        for t in self.tables:
            rows.append((t.table, "heap", t.rows, t.heap, _per(t.heap, t.rows)))
            for name, size in sorted(t.indexes.items(), key=lambda i: -i[1]):
                rows.append(("", f"index {name}", "", size, _per(size, t.rows)))
            rows.append(("", "total", "", t.total, _per(t.total, t.rows)))
        return format_table(["table", "part", "rows", "bytes", "bytes/row"], rows)

    def summary(self) -> str:
        raw = self.raw_bytes / self.values if self.values else float("nan")
        verdict = "met" if self.per_value() <= TARGET_BYTES_PER_VALUE else "missed"
        return (
            f"per stored value ({self.values:,} values): {self.per_value():,.1f} B for telemetry"
            f" + endpoint events, indexes included; target ≤ {TARGET_BYTES_PER_VALUE} B"
            f" ({verdict}); the raw message text is {raw:,.1f} B per value"
            f" ({self.per_value() / raw:,.1f}× it)\n{self.read_values()}"
        )

    def read_values(self) -> str:
        """What a value something reads costs: an event row is written only for those."""
        sized = {t.table: t for t in self.tables}
        telemetry = sized[Telemetry._meta.db_table]
        events = sized[AutomationEndpointEvent._meta.db_table]
        if not events.rows:
            return "no value here is read by a rule, a threshold reminder or a watchdog"
        row = events.total / events.rows
        message_share = telemetry.total / self.values
        return (
            f"an endpoint event (only for a value a rule, a threshold reminder or a watchdog"
            f" reads; {events.rows:,} of {self.values:,} here): {row:,.1f} B per row, so such"
            f" a value costs {message_share + row:,.1f} B and any other {message_share:,.1f} B"
        )


def _per(size: int, rows: int) -> float | str:
    return size / rows if rows else "-"


def storage_unavailable() -> str | None:
    """Why the storage bench cannot run here, if it cannot."""
    if connection.vendor != "postgresql":
        return (
            f"storage: skipped on {connection.vendor}: bytes per row need PostgreSQL "
            "(per-index sizes and VACUUM FULL); set DATABASE_URL to a PostgreSQL database"
        )
    return None


def storage_run(
    *, devices: int, messages: int, batch: int, write: Write, read_all: bool = False
) -> None:
    """The storage bench as ``manage.py bench --storage`` prints it."""
    flag = " --read-all" if read_all else ""
    write(f"command: manage.py bench --storage --devices {devices} --messages {messages}{flag}")
    skipped = storage_unavailable()
    if skipped:
        write(skipped)
        return
    version: int = getattr(connection, "pg_version", 0)
    write(f"database: postgresql {version // 10000}.{version % 10000}")
    result = storage_bench(devices=devices, messages=messages, batch=batch, read_all=read_all)
    read = "every value read" if read_all else "one endpoint read by a rule"
    write(
        f"\nStorage: {messages:,} messages × {len(SENSOR_KEYS)} values through ingest and"
        f" evaluation ({read}), after VACUUM FULL"
    )
    write(result.table())
    write(result.summary())


def storage_bench(
    *, devices: int, messages: int, batch: int, read_all: bool = False
) -> StorageResult:
    """Ingest and evaluate ``messages`` messages on a fresh fleet of ``devices`` sensors (and
    one relay with the fleet's rule pair on the first sensor); returns what the measured
    tables grew by. With ``read_all`` each sensor endpoint is also a threshold reminder's
    metric, so every value is read and becomes an endpoint event. The fleet and its rows are
    deleted, and the tables compacted, on exit."""
    progress = Progress("storage")
    before = _sizes(progress)
    tag = uuid.uuid4().hex[:8]
    try:
        with fleet_seeded(tag=f"{tag}s", farms=1, sensors_per_farm=devices, relays=True) as fleet:
            if read_all:
                _every_endpoint_read(fleet)
            inbound = _received_apart(telemetry_messages(fleet, messages))
            _ingest_and_evaluate(inbound, batch, progress)
            after = _sizes(progress)
    finally:
        _vacuum_full(progress)  # the deleted fleet leaves no bloat behind
    return StorageResult(
        messages=messages,
        values=messages * len(SENSOR_KEYS),
        raw_bytes=sum(len(m.payload.encode()) for m in inbound),
        tables=[a.minus(b) for a, b in zip(after, before, strict=True)],
    )


def _every_endpoint_read(fleet: BenchFleet) -> None:
    """A threshold reminder's metric on every sensor endpoint of the fleet: each is then
    read (``endpoints_read``), as on a farm where every value feeds some rule or reminder."""
    now = timezone.now()
    endpoints = DeviceInstanceEndpoint.objects.filter(
        device__serial_number__in=fleet.sensors
    ).select_related("device", "profile_endpoint")
    EndpointMetricSource.objects.bulk_create(
        EndpointMetricSource(
            farm_id=e.device.farm_id,
            endpoint=e,
            metric_key=f"bench-{e.profile_endpoint.key}"[:60],
            aggregate=MetricAggregate.LATEST,
            created_at=now,
            updated_at=now,
        )
        for e in endpoints
    )


def _received_apart(inbound: list[InboundTelemetry]) -> list[InboundTelemetry]:
    """Each message received shortly after its device time, as on a live system: one receive
    time for the whole batch would let the index on it deduplicate to almost nothing."""
    return [
        replace(m, received_at=datetime.fromisoformat(json.loads(m.payload)["ts"]) + LATENCY)
        for m in inbound
    ]


def _ingest_and_evaluate(
    inbound: Sequence[InboundTelemetry], batch: int, progress: Progress
) -> None:
    """As the bridge and the evaluate workers do: each batch's new events evaluated in chunks
    of ``EVALUATE_BATCH_SIZE`` (no worker: the hand-offs that follow are not sent)."""
    chunk = settings.EVALUATE_BATCH_SIZE
    for start in range(0, len(inbound), batch):
        result = telemetry_ingest(messages=inbound[start : start + batch])
        ids = result.pending_event_ids
        for i in range(0, len(ids), chunk):
            endpoint_events_evaluate(event_ids=ids[i : i + chunk])
        progress.count(min(start + batch, len(inbound)), len(inbound), "messages ingested")


def _vacuum_full(progress: Progress) -> None:
    with connection.cursor() as cursor:
        for model in MEASURED:
            progress.update(f"VACUUM FULL {model._meta.db_table}")
            cursor.execute(f"VACUUM FULL ANALYZE {connection.ops.quote_name(model._meta.db_table)}")


def _sizes(progress: Progress) -> list[TableSize]:
    _vacuum_full(progress)
    return [_size(model) for model in MEASURED]


# A relation and, when it is partitioned (a table or its index), every partition under it:
# the partitioned parent itself holds no bytes.
_TREE = "SELECT %s::regclass AS relid UNION SELECT relid FROM pg_partition_tree(%s::regclass)"


def _size(model: type[models.Model]) -> TableSize:
    table = model._meta.db_table
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT count(*) FROM {connection.ops.quote_name(table)}")
        (rows,) = cursor.fetchone()
        cursor.execute(f"SELECT sum(pg_table_size(relid)) FROM ({_TREE}) AS t", [table, table])
        heap = int(cursor.fetchone()[0] or 0)
        cursor.execute(
            "SELECT c.relname, c.oid::regclass::text FROM pg_index i"
            " JOIN pg_class c ON c.oid = i.indexrelid WHERE i.indrelid = %s::regclass",
            [table],
        )
        indexes = {}
        for name, index in cursor.fetchall():
            cursor.execute(
                f"SELECT sum(pg_relation_size(relid)) FROM ({_TREE}) AS t", [index, index]
            )
            indexes[name] = int(cursor.fetchone()[0] or 0)
    if rows and not heap:
        raise BenchError(f"{table}: {rows:,} rows measured as 0 bytes")
    return TableSize(table, rows, heap, indexes)
