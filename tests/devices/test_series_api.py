"""An endpoint's readings read back per time bucket (``GET /api/v1/endpoints/<id>/series/``):
buckets aligned on the epoch and half-open at their edges, empty ones left out, min, max,
avg, last (the latest reading, the newest row on a tie) and count computed by the database,
whole-hour buckets from the hourly rollups; every bad parameter is a 400 naming it, and
another organisation's endpoint is a 404. The same tests run on SQLite and PostgreSQL."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import time_machine
from rest_framework.test import APIClient

from common.models import MemberRole, OrganizationMember
from devices.models import DeviceInstanceEndpoint, TelemetryRollup
from devices.series import SERIES_MAX_POINTS
from tests.common.auth import token_client
from tests.conftest import Tenant
from tests.devices.factories import stored_reading

pytestmark = pytest.mark.django_db

T0 = datetime(2026, 5, 4, 10, 0, tzinfo=UTC)
S = timedelta(seconds=1)


def rollup(endpoint: DeviceInstanceEndpoint, hour: datetime, values: list[float]) -> None:
    """An hour's rollup of ``values`` read one a minute from the hour's start."""
    TelemetryRollup.objects.create(
        endpoint=endpoint,
        hour=hour,
        value_min=min(values),
        value_max=max(values),
        value_sum=sum(values),
        value_count=len(values),
        last_value=values[-1],
        last_at=hour + timedelta(minutes=len(values) - 1),
    )


def series(client: APIClient, endpoint: DeviceInstanceEndpoint, **params: Any) -> Any:
    return client.get(f"/api/v1/endpoints/{endpoint.pk}/series/", params)


def iso(at: datetime) -> str:
    return at.strftime("%Y-%m-%dT%H:%M:%SZ")


def points(body: dict[str, Any]) -> list[tuple[str, float, float, float, float, int]]:
    return [(p["t"], p["min"], p["max"], p["avg"], p["last"], p["count"]) for p in body["points"]]


def test_buckets_at_their_edges_and_empty_ones_left_out(tenants: tuple[Tenant, Tenant]) -> None:
    alpha, _ = tenants
    temp = alpha.kit.temp
    stored_reading(temp, T0 - S, 99.0)  # before the window
    stored_reading(temp, T0, 10.0)  # a bucket's first instant is in it
    stored_reading(temp, T0 + 59 * S + timedelta(milliseconds=999), 14.0)  # its last instant too
    stored_reading(temp, T0 + 30 * S, 12.0)
    stored_reading(temp, T0 + 60 * S, 20.0)  # the next bucket's first
    stored_reading(temp, T0 + 3 * 60 * S, 7.0)  # minute 2 has no reading: left out
    stored_reading(temp, T0 + 3 * 60 * S, 8.0)  # same time: the newer row is the last
    stored_reading(temp, T0 + 4 * 60 * S, 50.0)  # at ``to``: outside (half-open)
    stored_reading(alpha.kit.humidity, T0 + 10 * S, 1000.0)  # another endpoint
    window = {"from": iso(T0), "to": iso(T0 + 240 * S)}
    response = series(token_client(alpha.user), temp, **window, bucket="60")
    assert response.status_code == 200, response.content
    body = response.json()
    assert (body["endpoint"], body["bucket"], body["source"]) == (temp.pk, 60, "readings")
    assert (body["from"], body["to"]) == ("2026-05-04T10:00:00Z", "2026-05-04T10:04:00Z")
    assert points(body) == [
        ("2026-05-04T10:00:00Z", 10.0, 14.0, 12.0, 14.0, 3),
        ("2026-05-04T10:01:00Z", 20.0, 20.0, 20.0, 20.0, 1),
        ("2026-05-04T10:03:00Z", 7.0, 8.0, 7.5, 8.0, 2),
    ]


def test_the_window_is_widened_to_whole_buckets(tenants: tuple[Tenant, Tenant]) -> None:
    alpha, _ = tenants
    temp = alpha.kit.temp
    stored_reading(temp, T0 + 5 * S, 1.0)  # before ``from`` but in its bucket
    stored_reading(temp, T0 + 14 * 60 * S, 3.0)
    window = {"from": iso(T0 + 10 * S), "to": iso(T0 + 14 * 60 * S + S)}
    body = series(token_client(alpha.user), alpha.kit.temp, **window, bucket="PT5M").json()
    assert (body["from"], body["to"], body["bucket"]) == (
        "2026-05-04T10:00:00Z",
        "2026-05-04T10:15:00Z",
        300,
    )
    assert points(body) == [
        ("2026-05-04T10:00:00Z", 1.0, 1.0, 1.0, 1.0, 1),
        ("2026-05-04T10:10:00Z", 3.0, 3.0, 3.0, 3.0, 1),
    ]


def test_a_boolean_endpoint_reads_as_zero_and_one(tenants: tuple[Tenant, Tenant]) -> None:
    alpha, _ = tenants
    io1 = alpha.kit.io1
    for minute, value in enumerate([True, False, True, True]):
        stored_reading(io1, T0 + minute * 60 * S, value)
    window = {"from": iso(T0), "to": iso(T0 + 600 * S)}
    body = series(token_client(alpha.user), io1, **window, bucket="600").json()
    assert points(body) == [("2026-05-04T10:00:00Z", 0.0, 1.0, 0.75, 1.0, 4)]


def test_whole_hour_buckets_merge_the_hourly_rollups(tenants: tuple[Tenant, Tenant]) -> None:
    alpha, _ = tenants
    temp = alpha.kit.temp
    rollup(temp, T0, [4.0, 6.0])  # 10:00, last at 10:01
    rollup(temp, T0 + timedelta(hours=1), [1.0, 2.0, 9.0])  # 11:00, last 9 at 11:02
    rollup(temp, T0 + timedelta(hours=4), [5.0])  # 14:00: the next two-hour bucket
    rollup(temp, T0 + timedelta(hours=6), [100.0])  # 16:00 = ``to``: outside
    window = {"from": iso(T0), "to": iso(T0 + timedelta(hours=6))}
    body = series(token_client(alpha.user), temp, **window, bucket="7200").json()
    assert (body["source"], body["bucket"]) == ("hourly_rollups", 7200)
    assert points(body) == [
        ("2026-05-04T10:00:00Z", 1.0, 9.0, 22.0 / 5, 9.0, 5),
        ("2026-05-04T14:00:00Z", 5.0, 5.0, 5.0, 5.0, 1),
    ]


@time_machine.travel(T0 + timedelta(hours=2), tick=False)
def test_defaults_are_the_last_day_in_at_most_the_bounded_points(
    tenants: tuple[Tenant, Tenant],
) -> None:
    alpha, _ = tenants
    stored_reading(alpha.kit.temp, T0, 3.0)
    body = series(token_client(alpha.user), alpha.kit.temp).json()
    assert body["bucket"] == 120  # 60 s would be 1,440 buckets
    assert (body["from"], body["to"]) == ("2026-05-03T12:00:00Z", "2026-05-04T12:00:00Z")
    assert points(body) == [("2026-05-04T10:00:00Z", 3.0, 3.0, 3.0, 3.0, 1)]


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"from": iso(T0), "to": iso(T0)}, "to"),  # an empty window
        ({"from": iso(T0 + S), "to": iso(T0)}, "to"),
        ({"from": "yesterday", "to": iso(T0)}, "from"),
        ({"from": "1969-12-31T23:59:59Z", "to": iso(T0)}, "from"),
        ({"from": "2020-01-01T00:00:00Z", "to": iso(T0)}, "from"),  # more than two years
        ({"to": "9999-12-31T23:59:59Z", "from": "9999-12-31T00:00:00Z"}, "to"),
        ({"from": iso(T0), "to": iso(T0 + timedelta(days=1)), "bucket": "60"}, "bucket"),
        ({"bucket": "0"}, "bucket"),
        ({"bucket": "-60"}, "bucket"),
        ({"bucket": "1.5"}, "bucket"),
        ({"bucket": "PT0.5S"}, "bucket"),
        ({"bucket": "5 minutes"}, "bucket"),
        ({"bucket": "P99999999999D"}, "bucket"),
        ({"bucket": "9" * 40}, "bucket"),
    ],
)
def test_a_bad_parameter_is_a_400_naming_it(
    tenants: tuple[Tenant, Tenant], params: dict[str, str], field: str
) -> None:
    alpha, _ = tenants
    response = series(token_client(alpha.user), alpha.kit.temp, **params)
    assert response.status_code == 400, response.content
    assert list(response.json()["fields"]) == [field]


def test_too_many_buckets_says_how_wide_they_must_be(tenants: tuple[Tenant, Tenant]) -> None:
    alpha, _ = tenants
    window = {"from": iso(T0), "to": iso(T0 + timedelta(days=1))}
    response = series(token_client(alpha.user), alpha.kit.temp, **window, bucket="60")
    (message,) = response.json()["fields"]["bucket"]
    assert f"at most {SERIES_MAX_POINTS}" in message and "87 seconds" in message
    fits = series(token_client(alpha.user), alpha.kit.temp, **window, bucket="87")
    assert fits.status_code == 200 and fits.json()["bucket"] == 87


def test_an_enum_endpoint_has_no_series(tenants: tuple[Tenant, Tenant]) -> None:
    alpha, _ = tenants
    stored_reading(alpha.kit.mode, T0, "auto")
    response = series(token_client(alpha.user), alpha.kit.mode)
    assert response.status_code == 400
    assert list(response.json()["fields"]) == ["endpoint"]


def test_a_viewer_reads_and_another_organisation_finds_nothing(
    tenants: tuple[Tenant, Tenant],
) -> None:
    alpha, beta = tenants
    stored_reading(alpha.kit.temp, T0, 3.0)
    OrganizationMember.objects.filter(user=alpha.user).update(role=MemberRole.VIEWER)
    window = {"from": iso(T0), "to": iso(T0 + 60 * S)}
    mine = series(token_client(alpha.user), alpha.kit.temp, **window)
    assert mine.status_code == 200 and len(mine.json()["points"]) == 1
    theirs = series(token_client(beta.user), alpha.kit.temp, **window)
    assert theirs.status_code == 404
    gone = token_client(alpha.user).get("/api/v1/endpoints/999999999/series/")
    assert gone.status_code == 404
