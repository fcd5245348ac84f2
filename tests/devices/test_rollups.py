"""Hourly rollups fold each telemetry row in once: a second run, a redelivered task and a batch
that died before commit add nothing twice; an hour split across batches merges to exactly
the aggregate of one pass; a batch costs the same statements whatever its size; rollups past
their retention go in bounded batches; the lag is on ``/metrics``."""

from __future__ import annotations

import json
import threading
import time
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import time_machine
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext

from automation.metrics import execution_core_gauges
from automation.services.ingest import telemetry_ingest
from config.beat import beat_schedule
from config.celery import app as celery_app
from devices.models import Device, Telemetry, TelemetryRollup, TelemetryRollupWatermark
from devices.mqtt.messages import InboundTelemetry
from devices.selectors import telemetry_rolled_up_through, telemetry_rollup_lag_s
from devices.services import rollups
from devices.services.rollups import (
    ROLLUP_SETTLE_S,
    telemetry_rollups_advance,
    telemetry_rollups_prune,
)
from devices.tasks import telemetry_rollups_advance_task
from tests.concurrency import race
from tests.devices.factories import FarmKit, make_farm

pytestmark = pytest.mark.django_db

T0 = datetime(2026, 5, 4, 10, 0, tzinfo=UTC)


def store(device: Device, at: datetime, values: dict[str, Any]) -> Telemetry:
    """A telemetry row as ingest leaves it (the payload, its device time), stored directly so
    that device times may lie months back."""
    payload = json.dumps({"ts": at.isoformat(), "values": values})
    return Telemetry.objects.create(
        device=device,
        raw_payload=payload,
        fingerprint=uuid.uuid4().bytes,
        message_ts=at,
        received_at=at,
    )


def fold(**kwargs: Any) -> rollups.RollupRun:
    """Every stored row in, as if the settle delay had passed."""
    kwargs.setdefault("settle_s", 0)
    return telemetry_rollups_advance(**kwargs)


def rows() -> list[tuple[Any, ...]]:
    return list(
        TelemetryRollup.objects.order_by("endpoint_id", "hour").values_list(
            "endpoint_id",
            "hour",
            "value_min",
            "value_max",
            "value_sum",
            "value_count",
            "last_value",
            "last_at",
        )
    )


def rollups_reset() -> None:
    TelemetryRollup.objects.all().delete()
    TelemetryRollupWatermark.objects.all().delete()


@pytest.fixture
def kit() -> FarmKit:
    return make_farm(prefix="roll")


def test_readings_fold_into_each_endpoints_hour(kit: FarmKit) -> None:
    store(kit.sensor, T0 + timedelta(minutes=5), {"temp": 20, "humidity": 50})
    store(kit.sensor, T0 + timedelta(minutes=50), {"temp": 23.5, "nope": 1})
    store(kit.sensor, T0 + timedelta(minutes=20), {"temp": "hot", "humidity": 54})  # not a number
    store(kit.sensor, T0 + timedelta(hours=1, minutes=1), {"temp": 19})
    store(kit.actuator, T0 + timedelta(minutes=1), {"io1": True, "mode": "auto", "fan": 40})
    store(kit.actuator, T0 + timedelta(minutes=2), {"io1": False, "fan": 1e400})  # inf: refused
    run = fold()
    assert (run.telemetry_rows, run.batches) == (6, 1)
    hour, next_hour = T0, T0 + timedelta(hours=1)
    assert rows() == sorted(
        [
            (kit.temp.pk, hour, 20.0, 23.5, 43.5, 2, 23.5, T0 + timedelta(minutes=50)),
            (kit.temp.pk, next_hour, 19.0, 19.0, 19.0, 1, 19.0, next_hour + timedelta(minutes=1)),
            (kit.humidity.pk, hour, 50.0, 54.0, 104.0, 2, 54.0, T0 + timedelta(minutes=20)),
            (kit.io1.pk, hour, 0.0, 1.0, 1.0, 2, 0.0, T0 + timedelta(minutes=2)),
            (kit.fan.pk, hour, 40.0, 40.0, 40.0, 1, 40.0, T0 + timedelta(minutes=1)),
        ]
    )  # the enum endpoint (mode) is not rolled up
    assert telemetry_rolled_up_through() == Telemetry.objects.latest("pk").pk


def test_ingested_readings_roll_up_as_their_endpoint_events_say(kit: FarmKit) -> None:
    """Through ingest: what became an endpoint event is what is rolled up."""
    now = datetime.now(UTC)
    values = [{"temp": 21.5}, {"temp": 22.5, "humidity": "wet"}, {"temp": True}]
    messages = [
        InboundTelemetry(
            kit.sensor.serial_number, json.dumps({"ts": now.isoformat(), "values": v}), now
        )
        for v in values
    ]
    telemetry_ingest(messages=messages)
    fold()
    ((endpoint, _hour, low, high, total, count, *_),) = rows()
    assert (endpoint, low, high, total, count) == (kit.temp.pk, 21.5, 22.5, 44.0, 2)


def test_a_second_run_and_a_redelivered_task_add_nothing(kit: FarmKit) -> None:
    for minute in range(0, 60, 7):
        store(kit.sensor, T0 + timedelta(minutes=minute), {"temp": minute / 4})
    fold(batch_size=3)
    once = rows()
    assert fold().telemetry_rows == 0  # the same run again, or its task redelivered
    assert fold(batch_size=1).telemetry_rows == 0
    assert rows() == once


def test_a_batch_that_dies_before_commit_leaves_nothing_and_is_folded_once_after(
    kit: FarmKit, monkeypatch: pytest.MonkeyPatch
) -> None:
    for minute in range(10):
        store(kit.sensor, T0 + timedelta(minutes=minute), {"temp": minute})
    fold(batch_size=4, max_batches=2)  # the horizon and the first batch (4 rows) are in
    before = rows()
    real = rollups._upsert

    def upsert_then_die(hours: Any) -> None:
        real(hours)
        raise RuntimeError("worker lost after the upsert")

    monkeypatch.setattr(rollups, "_upsert", upsert_then_die)
    with pytest.raises(RuntimeError):
        fold(batch_size=4)
    assert rows() == before
    monkeypatch.setattr(rollups, "_upsert", real)
    fold(batch_size=4)  # the redelivered task
    ((*_, total, count, last, _at),) = rows()
    assert (total, count, last) == (45.0, 10, 9.0)


def test_an_hour_split_across_batches_merges_exactly_as_one_pass(kit: FarmKit) -> None:
    """Values and device times out of id order, a tie in device time (the newer row wins),
    readings of the next hour: any batch size gives the rows one pass gives."""
    minutes = [40, 5, 59, 12, 40, 33, 0, 21, 59, 8, 47, 30]
    values = [2.5, -1.25, 7.75, 0.5, 3.0, 12.125, -4.0, 6.5, 1.5, 0.25, 9.0, -0.75]
    for minute, value in zip(minutes, values, strict=True):
        store(kit.sensor, T0 + timedelta(minutes=minute), {"temp": value, "humidity": value * 2})
        store(kit.actuator, T0 + timedelta(minutes=minute), {"io1": value > 1})
    store(kit.sensor, T0 + timedelta(hours=1, minutes=3), {"temp": 100.0})
    expected_temp = (
        kit.temp.pk,
        T0,
        -4.0,
        12.125,
        sum(values),
        12,
        1.5,  # both 59-minute rows tie: the later row's value
        T0 + timedelta(minutes=59),
    )
    results = []
    for size in (1, 5, 7, 1000):
        rollups_reset()
        fold(batch_size=size, max_batches=100)
        results.append(rows())
    assert all(r == results[-1] for r in results)
    assert expected_temp in results[-1]
    io1 = next(r for r in results[-1] if r[0] == kit.io1.pk)
    assert io1[2:6] == (0.0, 1.0, sum(v > 1 for v in values), 12)


def test_rows_stored_after_the_horizon_wait_for_the_next_one(kit: FarmKit) -> None:
    store(kit.sensor, T0, {"temp": 1})
    first = telemetry_rollups_advance(clock=lambda: T0)  # takes the horizon, folds nothing
    assert first.telemetry_rows == 0 and rows() == []
    store(kit.sensor, T0, {"temp": 2})  # stored after the horizon was read
    early = T0 + timedelta(seconds=ROLLUP_SETTLE_S - 1)
    assert telemetry_rollups_advance(clock=lambda: early).telemetry_rows == 0
    settled = T0 + timedelta(seconds=ROLLUP_SETTLE_S)
    assert telemetry_rollups_advance(clock=lambda: settled).telemetry_rows == 1
    assert rows()[0][5] == 1
    later = settled + timedelta(seconds=ROLLUP_SETTLE_S)
    assert telemetry_rollups_advance(clock=lambda: later).telemetry_rows == 1
    assert rows()[0][5] == 2


def _counted(n: int, kit: FarmKit) -> int:
    rollups_reset()
    Telemetry.objects.all().delete()
    for i in range(n):
        device = kit.sensor if i % 2 else kit.actuator
        at = T0 + timedelta(minutes=17 * i)  # across hours and devices
        store(device, at, {"temp": i, "humidity": i, "io1": bool(i % 3), "fan": i, "mode": "auto"})
    telemetry_rollups_advance(clock=lambda: T0, max_batches=1)  # the horizon
    later = T0 + timedelta(seconds=ROLLUP_SETTLE_S)
    with CaptureQueriesContext(connection) as queries:
        run = telemetry_rollups_advance(clock=lambda: later, max_batches=1, batch_size=n)
    assert run.telemetry_rows == n
    return len(queries.captured_queries)


def test_statements_per_batch_do_not_grow_with_the_batch(kit: FarmKit) -> None:
    counts = {n: _counted(n, kit) for n in (1, 10, 100)}
    assert len(set(counts.values())) == 1, counts
    # A savepoint and its release, the lock, the rows, their endpoints, the upsert, the
    # watermark; then the prune's one DELETE.
    assert counts[1] == 8, counts


def test_rollups_past_their_retention_go_in_bounded_batches(kit: FarmKit, settings: Any) -> None:
    settings.RETENTION_ROLLUPS_DAYS = 730
    now = T0
    for days in (800, 760, 731, 729, 1):
        store(kit.sensor, now - timedelta(days=days), {"temp": days})
    fold(clock=lambda: now - timedelta(days=900))  # folded long ago: nothing yet expired
    assert len(rows()) == 5
    assert telemetry_rollups_prune(now=now, batch=2, max_batches=1) == 2
    assert telemetry_rollups_prune(now=now, batch=2) == 1
    kept = sorted((now - hour).days for _e, hour, *_ in rows())
    assert kept == [1, 729]


def test_the_lag_gauge_is_the_age_of_the_newest_covered_instant(kit: FarmKit) -> None:
    assert telemetry_rollup_lag_s(now=T0) == 0.0  # nothing stored
    store(kit.sensor, T0 - timedelta(minutes=10), {"temp": 1})
    assert telemetry_rollup_lag_s(now=T0) == 600.0  # never rolled up: the oldest row's age
    telemetry_rollups_advance(clock=lambda: T0)
    settled = T0 + timedelta(seconds=ROLLUP_SETTLE_S)
    telemetry_rollups_advance(clock=lambda: settled)  # folds and takes the next horizon
    assert telemetry_rollup_lag_s(now=settled) == ROLLUP_SETTLE_S
    stalled = settled + timedelta(hours=1)
    (family,) = [
        f for f in execution_core_gauges(stalled) if f.name == "farm_telemetry_rollup_lag_seconds"
    ]
    assert family.samples[0].value == 3600 + ROLLUP_SETTLE_S


def test_the_beat_task_folds_settled_telemetry_on_the_housekeeping_queue(kit: FarmKit) -> None:
    entry = beat_schedule()["telemetry-rollups-advance"]
    task = telemetry_rollups_advance_task
    assert entry.task == task.name and entry.task in celery_app.tasks
    assert task.stage_queue == "scheduler"
    assert task.soft_time_limit and task.time_limit
    store(kit.sensor, T0, {"temp": 3})
    with time_machine.travel(T0, tick=False):
        assert task.apply().get() == 0  # the horizon
    with time_machine.travel(T0 + timedelta(seconds=ROLLUP_SETTLE_S), tick=False):
        assert task.apply().get() == 1
    assert len(rows()) == 1


# On PostgreSQL, with real concurrent transactions.


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_concurrent_runs_fold_each_row_exactly_once(kit: FarmKit) -> None:
    expected: dict[tuple[int, datetime], list[float]] = {}
    for i in range(300):
        at = T0 + timedelta(minutes=7 * i)
        store(kit.sensor, at, {"temp": i * 0.5})
        expected.setdefault((kit.temp.pk, at.replace(minute=0)), []).append(i * 0.5)
    folded: list[int] = []

    def runs() -> None:
        for _ in range(5):
            folded.append(fold(batch_size=7, max_batches=4).telemetry_rows)

    assert race(runs, 6) == []
    folded.append(fold(max_batches=1000).telemetry_rows)
    assert sum(folded) == 300  # no row twice, none left out
    assert [(e, h, lo, hi, total, n) for e, h, lo, hi, total, n, *_ in rows()] == [
        (e, h, min(v), max(v), sum(v), len(v)) for (e, h), v in sorted(expected.items())
    ]


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_a_row_committed_after_a_higher_id_is_not_passed_over(kit: FarmKit) -> None:
    """Ingest A takes id N and commits late; ingest B takes N + 1 and commits first. The run
    in between sees only N + 1, but folds nothing past the horizon before it settled."""
    inserted, release, done = threading.Event(), threading.Event(), threading.Event()

    def slow_ingest() -> None:
        try:
            with transaction.atomic():
                store(kit.sensor, T0, {"temp": 1})
                inserted.set()
                release.wait(30)
        finally:
            connection.close()
            done.set()

    threading.Thread(target=slow_ingest).start()
    assert inserted.wait(30)
    later = store(kit.sensor, T0, {"temp": 2})
    assert telemetry_rollups_advance(clock=lambda: T0).telemetry_rows == 0  # the horizon
    horizon = TelemetryRollupWatermark.objects.get().horizon_id
    assert horizon == later.pk
    release.set()
    assert done.wait(30)
    settled = T0 + timedelta(seconds=ROLLUP_SETTLE_S)
    assert telemetry_rollups_advance(clock=lambda: settled).telemetry_rows == 2
    assert rows()[0][4:6] == (3.0, 2)


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_a_run_that_finds_the_watermark_locked_steps_aside_at_once(kit: FarmKit) -> None:
    store(kit.sensor, T0, {"temp": 1})
    fold(max_batches=1)  # the watermark row exists
    locked, release = threading.Event(), threading.Event()

    def hold() -> None:
        try:
            with transaction.atomic():
                TelemetryRollupWatermark.objects.select_for_update().get()
                locked.set()
                release.wait(30)
        finally:
            connection.close()

    holder = threading.Thread(target=hold)
    holder.start()
    assert locked.wait(30)
    started = time.monotonic()
    run = fold()
    assert run.busy and run.telemetry_rows == 0 and time.monotonic() - started < 5
    release.set()
    holder.join(30)
    assert fold().telemetry_rows == 1
