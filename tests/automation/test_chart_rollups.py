"""The device chart over a long window reads hourly rollups: 60 days still chart, spikes
included, after the raw telemetry and its endpoint events are gone, in the same three
queries, and on the device's admin page; the 24-hour chart keeps reading the raw events. The
page's window is, unless asked for, the smallest that holds the data."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

import pytest
import time_machine
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from automation.admin.chart import (
    MAX_BUCKETS,
    chart_svg,
    chart_window_fitting,
    device_chart_data,
)
from automation.models import AutomationEndpointEvent
from devices.models import Telemetry
from tests.devices.factories import FarmKit, make_farm, stored_reading
from tests.devices.test_rollups import fold, store

pytestmark = pytest.mark.django_db

NOW = datetime(2026, 6, 30, 12, 0, tzinfo=UTC)
SIXTY_DAYS = timedelta(days=60)


def _sixty_days_of_readings(kit: FarmKit) -> None:
    """A reading every 3 hours over 60 days (temp 20..25, one spike of 99 on day 40) and the
    relay switching, then the raw rows pruned."""
    for i in range(60 * 8):
        at = NOW - SIXTY_DAYS + timedelta(hours=3 * i, minutes=10)
        temp = 99 if i == 40 * 8 else 20 + i % 6
        store(kit.sensor, at, {"temp": temp, "humidity": 60})
        store(kit.actuator, at, {"io1": i % 2 == 0, "mode": "auto"})
    fold(clock=lambda: NOW, max_batches=100)
    AutomationEndpointEvent.objects.all().delete()
    Telemetry.objects.all().delete()


def test_a_sixty_day_chart_is_drawn_from_rollups_after_raw_data_expired() -> None:
    kit = make_farm(prefix="long")
    _sixty_days_of_readings(kit)
    with CaptureQueriesContext(connection) as queries:
        series, marks = device_chart_data(device=kit.sensor, now=NOW, window=SIXTY_DAYS)
    assert len(queries) == 3 and marks == []
    temp = next(s for s in series if s.label == "temp")
    assert 10 < len(temp.points) <= 2 * MAX_BUCKETS
    times = [at for at, _ in temp.points]
    assert times == sorted(times) and times[-1] - times[0] > timedelta(days=58)
    assert max(y for _, y in temp.points) == 99 and min(y for _, y in temp.points) == 20
    (relay, *_) = device_chart_data(device=kit.actuator, now=NOW, window=SIXTY_DAYS)
    by_label = {s.label: s for s in relay}
    assert {y for _, y in by_label["io1"].points} == {0.0, 1.0}
    assert by_label["mode"].points == []  # enums are not rolled up
    svg = chart_svg(series, marks, now=NOW, window=SIXTY_DAYS)
    assert "last 60 d (UTC)" in svg and ">05-01<" in svg
    assert re.findall(r'data-endpoint="(\w+)" data-points="(\d+)"', svg)[1] == (
        "temp",
        str(len(temp.points)),
    )


def test_the_day_chart_still_reads_the_raw_events() -> None:
    kit = make_farm(prefix="day")
    _sixty_days_of_readings(kit)  # rollups cover the last day too, the raw rows are gone
    series, _ = device_chart_data(device=kit.sensor, now=NOW)
    assert all(s.points == [] for s in series)


def test_the_device_page_offers_sixty_days_drawn_from_rollups(support: Client) -> None:
    kit = make_farm(prefix="page")
    _sixty_days_of_readings(kit)
    url = f"/admin/devices/device/{kit.sensor.pk}/change/"
    with time_machine.travel(NOW, tick=False):
        fitting = support.get(url).content.decode()
        day = support.get(f"{url}?chart=24h").content.decode()
        sixty = support.get(f"{url}?chart=60d").content.decode()
        unknown = support.get(f"{url}?chart=9y").content.decode()
    # Only rollups hold the data: the smallest window that reads them and holds the newest.
    assert "last 7 d (UTC)" in fitting and "<strong>7d</strong>" in fitting
    (points,) = re.findall(r'data-endpoint="temp" data-points="(\d+)"', fitting)
    assert int(points) > 10
    assert "last 24 h (UTC)" in day and '<a href="?chart=60d">60d</a>' in day
    assert re.findall(r'data-endpoint="temp" data-points="(\d+)"', day) == ["0"]
    assert "no readings in this window" in day
    assert "last 60 d (UTC)" in sixty and "<strong>60d</strong>" in sixty
    (points,) = re.findall(r'data-endpoint="temp" data-points="(\d+)"', sixty)
    assert 10 < int(points) <= 2 * MAX_BUCKETS
    assert "last 7 d (UTC)" in unknown  # an unknown window falls back to the fitting one


def test_the_chart_window_is_the_smallest_that_holds_the_data() -> None:
    kit = make_farm(prefix="fit")
    assert chart_window_fitting(device=kit.sensor, now=NOW) == "24h"  # nothing to hold
    for age, window in (
        (timedelta(minutes=50), "1h"),
        (timedelta(hours=20), "24h"),
        (timedelta(days=3), "7d"),
        (timedelta(days=30), "60d"),
    ):
        Telemetry.objects.all().delete()
        stored_reading(kit.temp, NOW - age, 21)
        stored_reading(kit.temp, NOW - age / 2, 22)
        assert chart_window_fitting(device=kit.sensor, now=NOW) == window, age
