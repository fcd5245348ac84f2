"""HTTP telemetry ingest reports what it refused: every rejected message (or value) is listed
with its reason code, a batch in which nothing could be taken is a 422, and a batch that
mixes good and bad messages keeps the good ones (202)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime

import pytest
import time_machine

from automation.models import AutomationEndpointEvent
from devices.models import DeviceMessageRejection, Telemetry
from tests.automation.test_api import _client
from tests.conftest import Tenant

pytestmark = pytest.mark.django_db

NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
URL = "/api/v1/telemetry/"


@pytest.fixture(autouse=True)
def _server_clock() -> Iterator[None]:
    with time_machine.travel(NOW, tick=False):
        yield


def test_a_reading_from_year_9999_is_a_422_with_its_reason(tenants: tuple[Tenant, Tenant]) -> None:
    alpha, _ = tenants
    client = _client(alpha.user)
    serial = alpha.kit.sensor.serial_number
    poisoned = {"ts": "9999-12-31T23:59:59Z", "values": {"temp": 10}}
    response = client.post(URL, {"messages": [{"serial": serial, "payload": poisoned}]}, "json")
    assert response.status_code == 422
    body = response.json()
    assert (body["telemetry"], body["events"], body["rejections"]) == (0, 0, 1)
    [rejected] = body["rejected"]
    assert (rejected["index"], rejected["serial"]) == (0, serial)
    assert (rejected["reason"], rejected["message_dropped"]) == ("timestamp_in_future", True)
    assert "9999-12-31" in rejected["detail"]
    assert DeviceMessageRejection.objects.get().reason_code == "timestamp_in_future"
    real = {"ts": "2026-11-29T11:59:58Z", "values": {"temp": 21}}
    response = client.post(URL, {"messages": [{"serial": serial, "payload": real}]}, "json")
    assert response.status_code == 202
    assert response.json() == {"telemetry": 1, "events": 1, "rejections": 0, "rejected": []}
    alpha.kit.temp.refresh_from_db()
    assert alpha.kit.temp.last_value_at == datetime(2026, 11, 29, 11, 59, 58, tzinfo=UTC)


def test_a_batch_keeps_its_good_messages_and_lists_the_rejected_ones(
    tenants: tuple[Tenant, Tenant],
) -> None:
    alpha, _ = tenants
    alpha.kit.rule()  # reads temp: its values are events
    serial = alpha.kit.sensor.serial_number
    messages = [
        {"serial": serial, "payload": {"ts": "2026-11-29T11:59:58Z", "values": {"temp": 1}}},
        {"serial": serial, "payload": {"ts": "0001-01-01T00:00:00Z", "values": {"temp": 2}}},
        {  # no ts: the gateway's received_at is the reading's time, and it is bounded too
            "serial": serial,
            "payload": {"values": {"temp": 3}},
            "received_at": "9999-12-31T23:59:59Z",
        },
        {"serial": serial, "payload": {"ts": "2026-11-29T11:59:59Z", "values": {"temp": 4}}},
    ]
    response = _client(alpha.user).post(URL, {"messages": messages}, "json")
    assert response.status_code == 202
    body = response.json()
    assert (body["telemetry"], body["events"], body["rejections"]) == (2, 2, 2)
    reasons = [(r["index"], r["reason"], r["message_dropped"]) for r in body["rejected"]]
    assert reasons == [(1, "timestamp_too_old", True), (2, "timestamp_in_future", True)]
    kept = AutomationEndpointEvent.objects.order_by("pk").values_list("normalized_value", flat=True)
    assert list(kept) == [1, 4]
    assert Telemetry.objects.count() == 2


def test_an_unknown_key_is_listed_and_the_message_kept(tenants: tuple[Tenant, Tenant]) -> None:
    alpha, _ = tenants
    serial = alpha.kit.sensor.serial_number
    payload = {"ts": "2026-11-29T11:59:58Z", "values": {"temp": 1, "co2": 400}}
    response = _client(alpha.user).post(
        URL, {"messages": [{"serial": serial, "payload": payload}]}, "json"
    )
    assert response.status_code == 202
    body = response.json()
    assert (body["telemetry"], body["events"], body["rejections"]) == (1, 1, 1)
    [rejected] = body["rejected"]
    assert (rejected["reason"], rejected["message_dropped"]) == ("unknown_endpoint", False)
    assert "co2" in rejected["detail"]


def test_a_replayed_422_is_the_first_answer(tenants: tuple[Tenant, Tenant]) -> None:
    alpha, _ = tenants
    client = _client(alpha.user)
    payload = {"ts": "9999-12-31T23:59:59Z", "values": {"temp": 10}}
    body = {"messages": [{"serial": alpha.kit.sensor.serial_number, "payload": payload}]}
    first = client.post(URL, body, "json", HTTP_IDEMPOTENCY_KEY="clock-1")
    again = client.post(URL, body, "json", HTTP_IDEMPOTENCY_KEY="clock-1")
    assert first.status_code == again.status_code == 422
    assert again.json() == first.json() and again["Idempotent-Replayed"] == "true"
    assert DeviceMessageRejection.objects.count() == 1
