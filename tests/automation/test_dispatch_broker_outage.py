"""Dispatch while the MQTT broker is away: an outage spends no attempts. A command that met
an unreachable broker waits in ``retrying`` (reason ``publish_error``, the wait capped) with
its budget and commandId intact until the publisher is back, and expires
(``broker_unreachable``) only once older than ``COMMAND_MAX_AGE_S``. A PUBACK timeout does
spend its attempt (tests/automation/test_dispatch.py)."""

from __future__ import annotations

import json
import queue
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

import pytest
from django.utils import timezone

from automation.models import DeviceCommand
from automation.services.dispatch import command_dispatch, commands_due
from automation.services.evaluate import endpoint_events_evaluate
from automation.services.ingest import telemetry_ingest
from automation.services.reconcile import command_reconcile
from config.env import MqttConfig
from devices.mqtt.messages import InboundTelemetry
from devices.mqtt.publisher import Publisher
from tests.devices.factories import FarmKit, make_farm
from tests.mqtt_fixtures import free_port

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("clock_at_fixture_dates")]

OUTAGE_TRIES = 5  # more than the attempt budget: none of them may count


@pytest.fixture
def dead(mqtt_config: MqttConfig) -> Publisher:
    """A publisher whose broker is away (nothing listens on its port; never connected)."""
    return Publisher(config=replace(mqtt_config, port=free_port()))


@pytest.fixture
def requests(mqtt_client_factory: Any) -> queue.Queue[dict[str, Any]]:
    """RPC requests as a device would receive them."""
    received: queue.Queue[dict[str, Any]] = queue.Queue()
    mqtt_client_factory(
        subscribe=["devices/+/rpc/request"],
        on_message=lambda _c, _u, msg: received.put(json.loads(msg.payload)),
    )
    return received


@pytest.fixture(autouse=True)
def _timers(settings: Any) -> None:
    settings.DEVICE_FRESHNESS_S = 3600  # the tests move the clock forward
    settings.PUBLISH_RETRY_MAX_WAIT_S = 2.0
    settings.COMMAND_MAX_AGE_S = 600.0


def _intent(kit: FarmKit) -> DeviceCommand:
    payload = json.dumps({"ts": "2026-11-29T11:59:00Z", "values": {"temp": 31}})
    ids = telemetry_ingest(
        messages=[InboundTelemetry(kit.sensor.serial_number, payload, timezone.now())]
    ).pending_event_ids
    [pk] = endpoint_events_evaluate(event_ids=ids).pending_command_ids
    return DeviceCommand.objects.get(pk=pk)


def _chain(intent: DeviceCommand) -> list[tuple[str, str, str]]:
    rows = intent.transitions.order_by("at", "pk")
    return list(rows.values_list("from_status", "to_status", "reason_code"))


def _wait_out_the_outage(
    intent: DeviceCommand, dead: Publisher, now: datetime, **kwargs: Any
) -> datetime:
    """Dispatch at every due time while the broker is away; returns the clock after."""
    for _ in range(OUTAGE_TRIES):
        outcome = command_dispatch(command_id=intent.pk, publish=dead.publish, now=now, **kwargs)
        assert outcome == "broker_unreachable"
        intent.refresh_from_db()
        assert intent.next_attempt_at is not None
        assert intent.next_attempt_at - now <= timedelta(seconds=2.0)  # the capped wait
        now = intent.next_attempt_at
    return now


def test_an_unreachable_broker_spends_no_attempt_and_the_command_goes_out_once_it_is_back(
    publisher: Publisher, dead: Publisher, requests: queue.Queue[dict[str, Any]]
) -> None:
    kit = make_farm()
    kit.rule()
    intent = _intent(kit)
    now = _wait_out_the_outage(intent, dead, timezone.now())

    assert (intent.status, intent.status_reason, intent.attempt_count) == (
        "retrying",
        "publish_error",
        0,
    )
    assert intent.inflight_endpoint_id == kit.io1.pk  # still holds its endpoint
    assert intent.device_command_id and "not connected" in intent.last_error
    assert commands_due(now=now, pending_older_than=now, limit=10) == [intent.pk]
    assert (
        command_dispatch(command_id=intent.pk, publish=publisher.publish, now=now) == "dispatched"
    )
    body = requests.get(timeout=5)
    intent.refresh_from_db()
    assert body["commandId"] == intent.device_command_id
    assert (intent.status, intent.attempt_count) == ("dispatched", 1)
    assert _chain(intent) == [
        ("pending_dispatch", "retrying", "publish_error"),
        ("retrying", "dispatched", "dispatched"),
    ]


def test_a_command_retrying_after_an_ack_timeout_keeps_its_budget_while_the_broker_is_away(
    publisher: Publisher, dead: Publisher, requests: queue.Queue[dict[str, Any]], settings: Any
) -> None:
    settings.ACK_TIMEOUT_S = 0.01
    kit = make_farm()
    kit.rule()
    intent = _intent(kit)
    now = timezone.now()
    command_dispatch(command_id=intent.pk, publish=publisher.publish, now=now)
    now += timedelta(seconds=1)
    assert command_reconcile(command_id=intent.pk, now=now) == "retrying"
    intent.refresh_from_db()
    # The sweep's path: the publisher's state says it is away, so nothing is claimed.
    now = _wait_out_the_outage(intent, dead, intent.next_attempt_at, connected=dead.is_connected)

    assert (intent.status_reason, intent.attempt_count, intent.lease_expires_at) == (
        "publish_error",
        1,
        None,
    )
    assert command_dispatch(command_id=intent.pk, publish=publisher.publish, now=now) == (
        "dispatched"
    )
    intent.refresh_from_db()
    assert intent.attempt_count == 2
    assert {requests.get(timeout=5)["commandId"] for _ in range(2)} == {intent.device_command_id}
    assert _chain(intent)[1:] == [
        ("dispatched", "retrying", "ack_timeout"),
        ("retrying", "retrying", "publish_error"),  # audited once, not once per try
        ("retrying", "dispatched", "dispatched"),
    ]


def test_a_command_the_broker_never_took_expires_once_older_than_its_lifetime(
    dead: Publisher, settings: Any
) -> None:
    settings.COMMAND_MAX_AGE_S = 60.0
    kit = make_farm()
    kit.rule()
    intent = _intent(kit)
    _wait_out_the_outage(intent, dead, intent.created_at)
    assert intent.status == "retrying"

    later = intent.created_at + timedelta(seconds=60)
    outcome = command_dispatch(command_id=intent.pk, publish=dead.publish, now=later)

    intent.refresh_from_db()
    assert outcome == "expired"
    assert (intent.status, intent.status_reason, intent.attempt_count) == (
        "expired",
        "broker_unreachable",
        0,
    )
    assert intent.inflight_endpoint_id is None and intent.finished_at == later
    assert _chain(intent)[-1] == ("retrying", "expired", "broker_unreachable")


def test_a_pending_command_older_than_its_lifetime_expires_at_its_first_unreachable_publish(
    dead: Publisher, settings: Any
) -> None:
    settings.COMMAND_MAX_AGE_S = 60.0
    kit = make_farm()
    kit.rule()
    intent = _intent(kit)
    later = intent.created_at + timedelta(seconds=61)

    assert command_dispatch(command_id=intent.pk, publish=dead.publish, now=later) == ("expired")
    intent.refresh_from_db()
    assert (intent.status, intent.status_reason, intent.attempt_count) == (
        "expired",
        "broker_unreachable",
        0,
    )
