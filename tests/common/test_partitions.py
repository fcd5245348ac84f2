"""Time partitions of telemetry and endpoint events on PostgreSQL: ranges exist ahead, an
expired range is dropped whole (never one holding a pending event, a live command's event or
a reading the rollups have not reached) at a cost that does not grow with its rows, a row
the default partition caught moves into its new range, and the dedupe keys hold across a
partition boundary under concurrent delivery."""

from __future__ import annotations

import itertools
import json
from datetime import UTC, datetime, timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from automation.models import AutomationEndpointEvent, DeviceCommand
from automation.services.evaluate import endpoint_events_evaluate
from automation.services.ingest import telemetry_ingest
from common.partitions import ahead_until, is_partitioned, partitions, partitions_ensure
from common.retention import retention_prune
from devices.models import Telemetry
from devices.mqtt.messages import InboundTelemetry
from devices.services.rollups import telemetry_rollups_advance
from tests.concurrency import race
from tests.devices.factories import FarmKit, make_farm

pytestmark = [pytest.mark.postgres, pytest.mark.django_db]

TELEMETRY = Telemetry._meta.db_table
EVENTS = AutomationEndpointEvent._meta.db_table
DAY = timedelta(days=1)


def _ingest(kit: FarmKit, ts: datetime, n: int = 1, *, temp: float = 20.0) -> list[int]:
    """``n`` distinct messages stamped ``ts`` (plus n ms); the new event ids."""
    messages = [
        InboundTelemetry(
            kit.sensor.serial_number,
            json.dumps(
                {"ts": (ts + timedelta(milliseconds=i)).isoformat(), "values": {"temp": temp + i}}
            ),
            timezone.now(),
        )
        for i in range(n)
    ]
    return telemetry_ingest(messages=messages).pending_event_ids


def _rolled_up() -> None:
    for _ in range(2):  # the first run may only take its horizon
        telemetry_rollups_advance(settle_s=0)


def _partition_of(table: str, pk: int) -> str:
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT tableoid::regclass::text FROM {table} WHERE id = %s", [pk])
        return str(cursor.fetchone()[0])


def _names(table: str) -> set[str]:
    return {p.name for p in partitions(table)}


def test_both_tables_are_partitioned_with_ranges_ahead() -> None:
    now = timezone.now()
    retention_prune(now=now)
    for table in (TELEMETRY, EVENTS):
        assert is_partitioned(table)
        ranges = partitions(table)
        assert ranges[0].lo <= now - 29 * DAY  # the migration's ranges back to the retention
        assert ranges[-1].hi >= ahead_until(now)
        assert all(a.hi == b.lo for a, b in itertools.pairwise(ranges))


def test_an_expired_range_goes_whole_only_once_nothing_in_it_is_needed() -> None:
    kit = make_farm()
    kit.rule(threshold_value=10_000)  # reads temp, so its events wait; never fires
    ts = timezone.now() - timedelta(minutes=5)
    ids = _ingest(kit, ts, 3)
    later = timezone.now() + 31 * DAY
    # A pending event keeps its range, and its reading's.
    retention_prune(now=later)
    assert AutomationEndpointEvent.objects.filter(pk__in=ids).count() == 3
    event_range = _partition_of(EVENTS, ids[0])
    assert event_range in _names(EVENTS)
    endpoint_events_evaluate(event_ids=ids)
    # Processed now, so the events' range goes; the readings wait for the rollups.
    result = retention_prune(now=later)
    assert event_range not in _names(EVENTS)
    assert result.deleted["automation.AutomationEndpointEvent"] == 3
    assert Telemetry.objects.count() == 3
    _rolled_up()
    result = retention_prune(now=later)
    assert result.deleted["devices.Telemetry"] == 3
    assert not Telemetry.objects.exists()
    assert all(p.hi > later - 31 * DAY for p in partitions(TELEMETRY))


def test_a_live_commands_event_keeps_its_range(kit_with_rule: FarmKit) -> None:
    ids = _ingest(kit_with_rule, timezone.now() - timedelta(minutes=1), temp=35.0)
    endpoint_events_evaluate(event_ids=ids)
    live = DeviceCommand.objects.get()
    assert live.status not in ("applied", "failed", "expired", "uncertain")
    retention_prune(now=timezone.now() + 31 * DAY)
    assert AutomationEndpointEvent.objects.filter(pk__in=ids).exists()


@pytest.fixture
def kit_with_rule() -> FarmKit:
    kit = make_farm()
    kit.rule(threshold_value=30, target_value=True)
    return kit


def _drop_statements(kit: FarmKit, day: datetime, rows: int) -> int:
    """Statements of the prune run that drops one range of ``rows`` readings and events: the
    range (re)made, filled, held by its pending events through a first run (which makes the
    moment's ranges and drops the empty ones), then released."""
    for table, key in ((TELEMETRY, "message_ts"), (EVENTS, "event_timestamp")):
        partitions_ensure(table, key, start=day, end=day + timedelta(seconds=1), span_s=86400)
    ids = _ingest(kit, day, rows)
    at = timezone.now() + 400 * DAY
    retention_prune(now=at)
    _rolled_up()
    endpoint_events_evaluate(event_ids=ids)
    with CaptureQueriesContext(connection) as queries:
        result = retention_prune(now=at)
    assert result.deleted["automation.AutomationEndpointEvent"] == rows
    assert result.deleted["devices.Telemetry"] == rows
    return len(queries.captured_queries)


def test_dropping_a_range_costs_the_same_for_1_and_200_rows() -> None:
    kit = make_farm()
    kit.rule(threshold_value=10_000)  # reads temp, so its events wait; never fires
    day = timezone.now().replace(hour=12, minute=0, second=0, microsecond=0) - 2 * DAY
    assert _drop_statements(kit, day, 1) == _drop_statements(kit, day + DAY, 200)


def test_a_row_the_default_partition_caught_moves_into_its_new_range() -> None:
    kit = make_farm()
    far = timezone.now() + 40 * DAY
    row = Telemetry.objects.create(
        device=kit.sensor, raw_payload="{}", fingerprint=b"f" * 16, message_ts=far, received_at=far
    )
    assert _partition_of(TELEMETRY, row.pk) == f"{TELEMETRY}_default"
    created = partitions_ensure(
        TELEMETRY, "message_ts", start=far, end=far + timedelta(seconds=1), span_s=86400
    )
    assert len(created) == 1
    assert _partition_of(TELEMETRY, row.pk) == created[0]
    assert bytes(Telemetry.objects.get(pk=row.pk).fingerprint) == b"f" * 16


def test_a_changed_span_fills_around_existing_ranges_without_overlap() -> None:
    now = timezone.now()
    partitions_ensure(TELEMETRY, "message_ts", start=now, end=now + 3 * DAY, span_s=7 * 86400)
    ranges = partitions(TELEMETRY)
    assert all(a.hi <= b.lo for a, b in itertools.pairwise(ranges))


@pytest.mark.django_db(transaction=True)
def test_the_dedupe_keys_hold_across_midnight_under_concurrent_delivery() -> None:
    """The same two messages, one a millisecond before midnight UTC and one at it, from 8
    threads three times each: one reading and one event each, in two partitions."""
    kit = make_farm()
    kit.rule()  # reads temp: each reading is an event too
    midnight = timezone.now().astimezone(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    stamps = [midnight - timedelta(milliseconds=1), midnight]
    for table, key in ((TELEMETRY, "message_ts"), (EVENTS, "event_timestamp")):
        # The two days' ranges, whatever an earlier run's prune left (it drops empty ones).
        partitions_ensure(table, key, start=midnight - DAY, end=midnight + DAY, span_s=86400)
    messages = [
        InboundTelemetry(
            kit.sensor.serial_number,
            json.dumps({"ts": ts.isoformat(), "values": {"temp": 21.5}}),
            timezone.now(),
        )
        for ts in stamps
    ]

    def deliver() -> None:
        for _ in range(3):
            telemetry_ingest(messages=messages)

    assert race(deliver, 8) == []
    rows = list(Telemetry.objects.order_by("message_ts"))
    assert [r.message_ts for r in rows] == stamps
    assert len({_partition_of(TELEMETRY, r.pk) for r in rows}) == 2
    events = AutomationEndpointEvent.objects.order_by("event_timestamp")
    assert [e.event_timestamp for e in events] == stamps
    assert len({_partition_of(EVENTS, e.pk) for e in events}) == 2


@pytest.mark.django_db(transaction=True)
def test_an_unstamped_message_redelivered_later_is_stored_once() -> None:
    """No ``ts``: each copy is timed by its arrival, which differs; 4 threads deliver copies
    received seconds apart, and one reading is stored."""
    kit = make_farm()
    kit.rule()  # reads temp: the reading is an event too
    payload = json.dumps({"values": {"temp": 22.0}})
    first = timezone.now()

    def deliver() -> None:
        for seconds in (0, 5, 30):
            copy = InboundTelemetry(
                kit.sensor.serial_number, payload, first + timedelta(seconds=seconds)
            )
            telemetry_ingest(messages=[copy])

    assert race(deliver, 4) == []
    assert Telemetry.objects.count() == 1
    assert AutomationEndpointEvent.objects.count() == 1
