"""A farm's raw readings as CSV (``GET /api/v1/readings/export/``): a line per value with the
device time in UTC and in the farm's zone, the serial, the endpoint's key and the value,
oldest first; a month of readings streams page by page in bounded memory; a window longer
than ``EXPORT_MAX_DAYS`` days or any bad parameter is a 400 naming it; viewers export, a
gateway may not, and another organisation's farm is a 404. SQLite and PostgreSQL alike."""

from __future__ import annotations

import csv
import io
import json
import tracemalloc
import uuid
from collections.abc import Iterable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.test import override_settings
from rest_framework.test import APIClient

from common.models import MemberRole, OrganizationMember
from devices.export import EXPORT_PAGE_ROWS
from devices.models import Device, Telemetry
from tests.common.auth import token_client
from tests.conftest import Tenant

pytestmark = pytest.mark.django_db

URL = "/api/v1/readings/export/"
HEADER = ["time_utc", "time_local", "serial", "endpoint", "value"]
T0 = datetime(2026, 3, 1, tzinfo=UTC)


def message(device: Device, at: datetime, values: dict[str, Any]) -> Telemetry:
    """A stored telemetry message as ingest keeps it (not saved)."""
    return Telemetry(
        device=device,
        raw_payload=json.dumps({"ts": at.isoformat(), "values": values}),
        fingerprint=uuid.uuid4().bytes,
        message_ts=at,
        received_at=at,
    )


def export(client: APIClient, **params: Any) -> Any:
    return client.get(URL, params)


def iso(at: datetime) -> str:
    return at.strftime("%Y-%m-%dT%H:%M:%SZ")


def rows_of(response: Any) -> list[list[str]]:
    assert response.status_code == 200, response.content
    assert response.streaming
    text = b"".join(response.streaming_content).decode()
    return list(csv.reader(io.StringIO(text)))


def farm_in(tenant: Tenant, time_zone: str) -> None:
    tenant.kit.farm.time_zone = time_zone
    tenant.kit.farm.save(update_fields=["time_zone"])


def test_a_line_per_value_in_utc_and_the_farms_time(tenants: tuple[Tenant, Tenant]) -> None:
    alpha, beta = tenants
    farm_in(alpha, "Europe/Berlin")
    kit = alpha.kit
    at = datetime(2026, 3, 29, 0, 59, 59, 500000, tzinfo=UTC)  # 01:59:59.5 CET, before DST
    Telemetry.objects.bulk_create(
        [
            message(kit.sensor, T0 - timedelta(seconds=1), {"temp": 1}),  # before ``from``
            message(kit.sensor, at, {"temp": 21.5, "humidity": 40, "stray": 3}),
            message(kit.actuator, at + timedelta(hours=1), {"io1": True, "mode": "auto"}),
            message(kit.sensor, at + timedelta(hours=2), {"temp": "warm"}),  # wrong type: out
            message(beta.kit.sensor, at, {"temp": 99}),  # another farm's
            message(kit.sensor, T0 + timedelta(days=31), {"temp": 2}),  # at ``to``: out
        ]
    )
    window = {"farm": kit.farm.pk, "from": iso(T0), "to": iso(T0 + timedelta(days=31))}
    response = export(token_client(alpha.user), **window)
    assert response["Content-Type"] == "text/csv; charset=utf-8"
    assert response["Content-Disposition"] == (
        f'attachment; filename="readings-farm{kit.farm.pk}-20260301T000000Z.csv"'
    )
    text = b"".join(response.streaming_content).decode()
    assert text.splitlines(keepends=True)[:2] == [
        "time_utc,time_local,serial,endpoint,value\r\n",
        "2026-03-29T00:59:59.500000Z,2026-03-29T01:59:59.500000+01:00,alpha-sensor,temp,21.5\r\n",
    ]
    assert list(csv.reader(io.StringIO(text)))[2:] == [
        ["2026-03-29T00:59:59.500000Z", "2026-03-29T01:59:59.500000+01:00", "alpha-sensor",
         "humidity", "40"],
        ["2026-03-29T01:59:59.500000Z", "2026-03-29T03:59:59.500000+02:00", "alpha-relay",
         "io1", "true"],
        ["2026-03-29T01:59:59.500000Z", "2026-03-29T03:59:59.500000+02:00", "alpha-relay",
         "mode", "auto"],
    ]  # fmt: skip
    one = rows_of(export(token_client(alpha.user), **window, endpoint=kit.io1.pk))
    assert [(r[2], r[3]) for r in one] == [("serial", "endpoint"), ("alpha-relay", "io1")]


def test_a_month_of_100k_readings_streams_in_bounded_memory(
    tenants: tuple[Tenant, Tenant],
) -> None:
    alpha, _ = tenants
    farm_in(alpha, "UTC")
    kit = alpha.kit
    count, step = 100_000, timedelta(seconds=26)  # 30 days of a reading each 26 s
    Telemetry.objects.bulk_create(
        (message(kit.sensor, T0 + i * step, {"temp": i}) for i in range(count)), batch_size=5000
    )
    last_at = T0 + (count - 1) * step
    window = {"farm": kit.farm.pk, "from": iso(T0), "to": iso(T0 + timedelta(days=31))}
    client = token_client(alpha.user)
    warm = export(
        client, **{**window, "to": iso(T0 + step)}
    )  # URL conf, zones: loaded once, not held
    assert len(rows_of(warm)) == 2
    tracemalloc.start()
    try:
        response = export(client, **window)
        assert response.status_code == 200
        lines, size, first, last = _consumed(response.streaming_content)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert lines == count + 1  # and the header
    assert first == "2026-03-01T00:00:00Z,2026-03-01T00:00:00+00:00,alpha-sensor,temp,0"
    assert last == f"{last_at:%Y-%m-%dT%H:%M:%S}Z,{last_at.isoformat()},alpha-sensor,temp,99999"
    # Materialised, the CSV alone would be ``size`` (7 MB) and the rows it came from several
    # times that; streamed, one page of EXPORT_PAGE_ROWS rows is held at a time (2.4 MB
    # measured, the driver's buffers included).
    assert size > 7_000_000 and count // EXPORT_PAGE_ROWS >= 50
    assert peak < 3_500_000, f"peak {peak / 1e6:.1f} MB while streaming {size / 1e6:.1f} MB"


def _consumed(chunks: Iterable[bytes]) -> tuple[int, int, str, str]:
    """How many lines and bytes the stream holds, its first line after the header and its
    last, keeping no more than a chunk."""
    lines, size, first, last = 0, 0, "", ""
    for chunk in chunks:
        size += len(chunk)
        text = chunk.decode()
        split = text.splitlines()
        if lines == 1 or (lines == 0 and len(split) > 1):
            first = split[1 - lines]
        lines += len(split)
        last = split[-1] if split else last
    return lines, size, first, last


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"to": iso(T0 + timedelta(days=2, seconds=1))}, "to"),  # past EXPORT_MAX_DAYS
        ({"to": iso(T0)}, "to"),  # an empty window
        ({"to": iso(T0 - timedelta(seconds=1))}, "to"),
        ({"from": None}, "from"),
        ({"to": None}, "to"),
        ({"from": "yesterday"}, "from"),
        ({"farm": None}, "farm"),
        ({"farm": "north"}, "farm"),
        ({"farm": "0"}, "farm"),
        ({"endpoint": "9" * 30}, "endpoint"),
    ],
)
@override_settings(EXPORT_MAX_DAYS=2)
def test_a_bad_parameter_is_a_400_naming_it(
    tenants: tuple[Tenant, Tenant], params: dict[str, Any], field: str
) -> None:
    alpha, _ = tenants
    query = {"farm": alpha.kit.farm.pk, "from": iso(T0), "to": iso(T0 + timedelta(days=2))}
    query.update(params)
    response = export(token_client(alpha.user), **{k: v for k, v in query.items() if v})
    assert response.status_code == 400, response.content
    assert response["Content-Type"] == "application/json"
    assert list(response.json()["fields"]) == [field]
    if field == "to" and "days" in str(response.json()):
        assert "EXPORT_MAX_DAYS" in response.json()["fields"]["to"][0]


@override_settings(EXPORT_MAX_DAYS=2)
def test_the_longest_window_and_another_farms_endpoint(tenants: tuple[Tenant, Tenant]) -> None:
    alpha, beta = tenants
    window = {"farm": alpha.kit.farm.pk, "from": iso(T0), "to": iso(T0 + timedelta(days=2))}
    client = token_client(alpha.user)
    assert rows_of(export(client, **window)) == [HEADER]
    theirs = export(client, **window, endpoint=beta.kit.temp.pk)
    assert theirs.status_code == 400 and list(theirs.json()["fields"]) == ["endpoint"]
    as_csv = export(client, **{**window, "format": "csv", "to": iso(T0)})
    assert as_csv.status_code == 400 and as_csv["Content-Type"] == "application/json"


def test_viewers_export_gateways_may_not_and_other_farms_are_not_found(
    tenants: tuple[Tenant, Tenant],
) -> None:
    alpha, beta = tenants
    Telemetry.objects.bulk_create([message(alpha.kit.sensor, T0, {"temp": 3})])
    window = {"from": iso(T0), "to": iso(T0 + timedelta(days=1))}
    OrganizationMember.objects.filter(user=alpha.user).update(role=MemberRole.VIEWER)
    mine = export(token_client(alpha.user), farm=alpha.kit.farm.pk, **window)
    assert len(rows_of(mine)) == 2
    theirs = export(token_client(beta.user), farm=alpha.kit.farm.pk, **window)
    assert theirs.status_code == 404 and theirs.json()["code"] == "not_found"
    assert export(token_client(alpha.user), farm=999999999, **window).status_code == 404
    OrganizationMember.objects.filter(user=alpha.user).update(role=MemberRole.GATEWAY)
    gateway = export(token_client(alpha.user), farm=alpha.kit.farm.pk, **window)
    assert gateway.status_code == 403
    assert export(APIClient(), farm=alpha.kit.farm.pk, **window).status_code == 401
