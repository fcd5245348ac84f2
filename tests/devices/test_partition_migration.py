"""The upgrade that partitions telemetry and endpoint events, on a database holding a day of
data from the previous release (a million readings, a fifth of them with an event): every
row keeps its id and columns, the ids go on past the old sequence, the dedupe keys still
absorb a copy, and undoing the migration gives plain tables with the same rows. The time per
million rows is printed for the runbook (a figure, not an assertion)."""

from __future__ import annotations

import sys
import time

import pytest
from django.db import connection
from django.utils import timezone

from automation.models import AutomationEndpointEvent
from common.partitions import is_partitioned, partitions
from common.sql import insert_ignore_returning
from devices.models import Telemetry
from tests.devices.factories import make_farm
from tests.migrating import migrate_to

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

BEFORE = [
    ("devices", "0014_telemetry_unread_indexes_dropped"),
    ("automation", "0012_retention_time_index"),
]
# The partitioning migrations, before the fingerprint became bytes (devices 0022).
PARTITIONED = [
    ("devices", "0021_device_health"),
    ("automation", "0013_events_partitioned"),
]
READINGS = 1_000_000
TELEMETRY = Telemetry._meta.db_table
EVENTS = AutomationEndpointEvent._meta.db_table


def _migrate(targets: list[tuple[str, str]] | None = None) -> None:
    migrate_to(targets)


def _seed(device_id: int, endpoint_id: int, organization_id: int, farm_id: int) -> None:
    """A day of readings from the previous release, written the way its ingest wrote them
    (one per 86 ms), and an event for every fifth."""
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {TELEMETRY} (device_id, raw_payload, fingerprint, message_ts, "
            "received_at) SELECT %s, '{\"values\": {\"temp\": ' || (i %% 40) || '}}', "
            "md5(i::text) || md5((-i)::text), now() - i * interval '86 ms', "
            "now() - i * interval '86 ms' FROM generate_series(1, %s) AS i",
            [device_id, READINGS],
        )
        cursor.execute(
            f"INSERT INTO {EVENTS} (organization_id, farm_id, device_id, "
            "device_instance_endpoint_id, source_telemetry_id, event_timestamp, "
            "normalized_value, dedupe_key, processing_status, status_reason, created_at, "
            "processed_at) SELECT %s, %s, %s, %s, t.id, t.message_ts, to_jsonb(t.id %% 40), "
            "md5('e' || t.id) || md5(t.id::text), 'processed', '', t.received_at, "
            f"t.received_at FROM {TELEMETRY} t WHERE t.id %% 5 = 0",
            [organization_id, farm_id, device_id, endpoint_id],
        )


def _summary(table: str) -> tuple[int, int, int, int]:
    """Count, id sum and id max, and a sum of the hashes of every row's columns."""
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT count(*), coalesce(sum(id), 0), coalesce(max(id), 0), "
            f"coalesce(sum(hashtext(t::text)::bigint), 0) FROM {table} t"
        )
        count, total, top, digest = cursor.fetchone()
    return int(count), int(total), int(top), int(digest)


def test_a_day_of_a_million_readings_is_partitioned_without_losing_a_row() -> None:
    kit = make_farm()
    _migrate(BEFORE)
    assert not is_partitioned(TELEMETRY) and not is_partitioned(EVENTS)
    _seed(kit.sensor.pk, kit.temp.pk, kit.farm.organization_id, kit.farm.pk)
    before = {table: _summary(table) for table in (TELEMETRY, EVENTS)}
    assert before[TELEMETRY][0] == READINGS
    started = time.monotonic()
    _migrate(PARTITIONED)
    took = time.monotonic() - started
    print(
        f"\npartitioning {READINGS:,} readings and {before[EVENTS][0]:,} events took "
        f"{took:.1f} s ({took / (READINGS / 1e6):.1f} s per million readings)",
        file=sys.stderr,
    )
    assert is_partitioned(TELEMETRY) and is_partitioned(EVENTS)
    assert {table: _summary(table) for table in (TELEMETRY, EVENTS)} == before
    assert len(partitions(TELEMETRY)) >= 2  # the day spans two ranges (or more)
    # Undone: plain tables with the same rows.
    _migrate(BEFORE)
    assert not is_partitioned(TELEMETRY) and not is_partitioned(EVENTS)
    assert {table: _summary(table) for table in (TELEMETRY, EVENTS)} == before
    _migrate(PARTITIONED)
    started = time.monotonic()
    _migrate()  # the fingerprint as 16 bytes: one rewrite of the partitioned table
    took = time.monotonic() - started
    print(
        f"\nfingerprints of {READINGS:,} readings as bytes took {took:.1f} s "
        f"({took / (READINGS / 1e6):.1f} s per million readings)",
        file=sys.stderr,
    )
    assert _summary(TELEMETRY)[:3] == before[TELEMETRY][:3]  # every row, every id
    # New ids continue past the old sequence; a copy of a stored reading is absorbed.
    stored = Telemetry.objects.order_by("pk").first()
    assert stored is not None
    copy: dict[str, object] = {
        "device": stored.device_id,
        "raw_payload": stored.raw_payload,
        "fingerprint": stored.fingerprint,
        "message_ts": stored.message_ts,
        "received_at": timezone.now(),
    }
    assert insert_ignore_returning(Telemetry, [copy]) == []
    fresh = Telemetry.objects.create(
        device_id=stored.device_id,
        raw_payload="{}",
        fingerprint=b"n" * 16,
        message_ts=stored.message_ts,
        received_at=timezone.now(),
    )
    assert fresh.pk > before[TELEMETRY][2]
    Telemetry.objects.filter(pk=fresh.pk).delete()
