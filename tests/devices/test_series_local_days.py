"""Day buckets of a series are the farm's local days: they start at the farm's midnight, so
the day of a DST change is 23 or 25 hours long, in the JSON answer and in its CSV; hour
buckets stay UTC hours. A zone offset by half an hour reads the readings, as its midnights
fall inside the hourly rollups' hours. The same tests run on SQLite and PostgreSQL."""

from __future__ import annotations

import csv
import io
import json
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from devices.models import DeviceInstanceEndpoint, Telemetry
from devices.series import OffsetSpan, offset_spans
from tests.common.auth import token_client
from tests.conftest import Tenant
from tests.devices.test_series_api import iso, points, rollup, series

pytestmark = pytest.mark.django_db


def at(text: str) -> datetime:
    return datetime.fromisoformat(text).astimezone(UTC)


def telemetry(endpoint: DeviceInstanceEndpoint, moment: datetime, value: float) -> None:
    """A stored message holding one reading (the series reads only the telemetry)."""
    Telemetry.objects.create(
        device=endpoint.device,
        raw_payload=json.dumps({"ts": moment.isoformat(), "values": {"temp": value}}),
        fingerprint=uuid.uuid4().bytes,
        message_ts=moment,
        received_at=moment,
    )


def farm_in(tenant: Tenant, time_zone: str) -> DeviceInstanceEndpoint:
    farm = tenant.kit.farm
    farm.time_zone = time_zone
    farm.save(update_fields=["time_zone"])
    return tenant.kit.temp


def csv_rows(response: Any) -> list[list[str]]:
    assert response.status_code == 200, response.content
    assert response["Content-Type"] == "text/csv; charset=utf-8"
    return list(csv.reader(io.StringIO(response.content.decode())))


def test_a_spring_forward_day_is_23_hours_in_json_and_csv(tenants: tuple[Tenant, Tenant]) -> None:
    alpha, _ = tenants
    temp = farm_in(alpha, "Europe/Berlin")  # 2026-03-29 02:00 CET -> 03:00 CEST
    rollup(temp, at("2026-03-28T22:00:00Z"), [1.0])  # 23:00 on the 28th
    rollup(temp, at("2026-03-28T23:00:00Z"), [2.0])  # the 29th's first hour
    rollup(temp, at("2026-03-29T00:00:00Z"), [3.0])  # 01:00 CET, the last before the gap
    rollup(temp, at("2026-03-29T01:00:00Z"), [4.0, 6.0])  # 03:00 CEST
    rollup(temp, at("2026-03-29T21:00:00Z"), [5.0])  # 23:00 CEST, the 29th's last hour
    rollup(temp, at("2026-03-29T22:00:00Z"), [9.0])  # the 30th's first hour
    window = {"from": "2026-03-28T12:00:00Z", "to": "2026-03-30T12:00:00Z", "bucket": "P1D"}
    client = token_client(alpha.user)
    body = series(client, temp, **window).json()
    assert (body["source"], body["bucket"]) == ("hourly_rollups", 86400)
    assert (body["from"], body["to"]) == ("2026-03-27T23:00:00Z", "2026-03-30T22:00:00Z")
    assert points(body) == [
        ("2026-03-27T23:00:00Z", 1.0, 1.0, 1.0, 1.0, 1),
        ("2026-03-28T23:00:00Z", 2.0, 6.0, 4.0, 5.0, 5),  # 23 hours
        ("2026-03-29T22:00:00Z", 9.0, 9.0, 9.0, 9.0, 1),
    ]
    rows = csv_rows(series(client, temp, **window, format="csv"))
    assert rows == [
        ["t", "min", "max", "avg", "last", "count"],
        ["2026-03-27T23:00:00Z", "1.0", "1.0", "1.0", "1.0", "1"],
        ["2026-03-28T23:00:00Z", "2.0", "6.0", "4.0", "5.0", "5"],
        ["2026-03-29T22:00:00Z", "9.0", "9.0", "9.0", "9.0", "1"],
    ]


def test_a_fall_back_day_is_25_hours(tenants: tuple[Tenant, Tenant]) -> None:
    alpha, _ = tenants
    temp = farm_in(alpha, "Europe/Berlin")  # 2026-10-25 03:00 CEST -> 02:00 CET
    rollup(temp, at("2026-10-24T21:00:00Z"), [1.0])  # 23:00 CEST on the 24th
    rollup(temp, at("2026-10-24T22:00:00Z"), [2.0])  # the 25th's first hour
    rollup(temp, at("2026-10-25T00:00:00Z"), [3.0])  # 02:00 CEST, the first 02:00
    rollup(temp, at("2026-10-25T01:00:00Z"), [4.0])  # 02:00 CET, the second
    rollup(temp, at("2026-10-25T22:00:00Z"), [5.0])  # 23:00 CET, the 25th's last hour
    rollup(temp, at("2026-10-25T23:00:00Z"), [6.0])  # the 26th's first hour
    window = {"from": "2026-10-24T12:00:00Z", "to": "2026-10-26T12:00:00Z", "bucket": "86400"}
    client = token_client(alpha.user)
    body = series(client, temp, **window).json()
    assert (body["from"], body["to"]) == ("2026-10-23T22:00:00Z", "2026-10-26T23:00:00Z")
    assert [(t, n) for t, *_, n in points(body)] == [
        ("2026-10-23T22:00:00Z", 1),
        ("2026-10-24T22:00:00Z", 4),  # 25 hours
        ("2026-10-25T23:00:00Z", 1),
    ]
    rows = csv_rows(series(client, temp, **window, format="csv"))
    assert [(r[0], r[-1]) for r in rows[1:]] == [(t, str(n)) for t, *_, n in points(body)]


def test_two_day_buckets_and_hours_stay_utc(tenants: tuple[Tenant, Tenant]) -> None:
    alpha, _ = tenants
    temp = farm_in(alpha, "America/New_York")  # 2026-03-08 02:00 EST -> 03:00 EDT
    rollup(temp, at("2026-03-08T05:00:00Z"), [1.0])  # 00:00 EST on the 8th, day 20520
    rollup(temp, at("2026-03-10T03:00:00Z"), [2.0])  # 23:00 EDT on the 9th
    rollup(temp, at("2026-03-10T04:00:00Z"), [3.0])  # 00:00 EDT on the 10th: the next two
    window = {"from": "2026-03-08T12:00:00Z", "to": "2026-03-10T12:00:00Z"}
    client = token_client(alpha.user)
    days = series(client, temp, **window, bucket="P2D").json()
    assert (days["from"], days["to"]) == ("2026-03-08T05:00:00Z", "2026-03-12T04:00:00Z")
    assert [(t, n) for t, *_, n in points(days)] == [
        ("2026-03-08T05:00:00Z", 2),  # the 8th and the 9th, 47 hours
        ("2026-03-10T04:00:00Z", 1),
    ]
    hours = series(client, temp, **window, bucket="PT6H").json()
    assert [(t, n) for t, *_, n in points(hours)] == [("2026-03-10T00:00:00Z", 2)]


def test_a_half_hour_zone_reads_the_readings(tenants: tuple[Tenant, Tenant]) -> None:
    alpha, _ = tenants
    temp = farm_in(alpha, "Asia/Kolkata")  # UTC+05:30: midnight is 18:30 UTC
    telemetry(temp, at("2026-05-03T18:29:59Z"), 1.0)  # 23:59:59 on the 3rd
    telemetry(temp, at("2026-05-03T18:30:00Z"), 2.0)  # the 4th's first instant
    telemetry(temp, at("2026-05-04T18:29:59Z"), 4.0)  # the 4th's last second
    telemetry(temp, at("2026-05-04T18:30:00Z"), 8.0)  # the 5th
    window = {"from": iso(at("2026-05-03T00:00:00Z")), "to": iso(at("2026-05-05T00:00:00Z"))}
    body = series(token_client(alpha.user), temp, **window, bucket="86400").json()
    assert body["source"] == "readings"
    assert points(body) == [
        ("2026-05-02T18:30:00Z", 1.0, 1.0, 1.0, 1.0, 1),
        ("2026-05-03T18:30:00Z", 2.0, 4.0, 3.0, 4.0, 2),
        ("2026-05-04T18:30:00Z", 8.0, 8.0, 8.0, 8.0, 1),
    ]


def test_offset_spans_match_the_zone_to_the_second() -> None:
    start, end = at("2026-01-01T00:00:00Z"), at("2027-01-01T00:00:00Z")
    assert offset_spans(start, end, "Europe/Berlin") == [
        OffsetSpan(int(at("2026-03-29T01:00:00Z").timestamp()), 3600),
        OffsetSpan(int(at("2026-10-25T01:00:00Z").timestamp()), 7200),
        OffsetSpan(None, 3600),
    ]
    assert offset_spans(start, end, "UTC") == [OffsetSpan(None, 0)]
    zone = ZoneInfo("America/New_York")
    (spring, fall, _) = offset_spans(start, end, "America/New_York")
    assert spring.until is not None and fall.until is not None
    before = datetime.fromtimestamp(spring.until - 1, UTC).astimezone(zone)
    after = datetime.fromtimestamp(spring.until, UTC).astimezone(zone)
    assert (before.hour, after.hour) == (1, 3)
    assert datetime.fromtimestamp(fall.until, UTC) - timedelta(hours=6) == at(
        "2026-11-01T00:00:00Z"
    )
