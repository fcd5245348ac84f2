"""Reconcile reads telemetry only for the commands a reading could still decide: once the
device refused the current attempt or reported the endpoint's state, a reading outranks
nothing (``decide``), so a batch settled by its receipts sends no telemetry read. A reading
that is the only proof still applies its command, through the hot path."""

from __future__ import annotations

import itertools
import json
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from automation.models import DeviceCommand
from automation.services.dispatch import commands_dispatch
from automation.services.ingest import telemetry_ingest
from automation.services.reconcile import (
    Evidence,
    commands_reconcile,
    decide,
    reading_may_decide,
)
from automation.states import COMMAND_AWAITING_DEVICE, CommandStatus
from common.hot_sql import statements_counted
from devices.mqtt.messages import InboundTelemetry
from tests.automation.test_batch_cost import _farms, _publish_many
from tests.automation.test_hot_path import _answered, _commands, orm_statements

pytestmark = pytest.mark.django_db

NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
ACK = (1, "accepted", "ok", NOW - timedelta(seconds=1))
BUSY = (1, "rejected", "busy", NOW)
REFUSED = (1, "rejected", "invalid_param", NOW)
REFUSED_BEFORE = (0, "rejected", "invalid_param", NOW)
STATES = ([], [{"io1": True}], [{"io1": False}], [{"fan": 10}])
RESPONSES = ([], [ACK], [BUSY], [REFUSED], [REFUSED_BEFORE], [ACK, REFUSED])
TELEMETRY = "devices_telemetry"


@pytest.mark.parametrize("status", sorted(COMMAND_AWAITING_DEVICE))
def test_a_reading_changes_no_verdict_where_reconcile_does_not_read_one(status: str) -> None:
    """Every combination of receipts, at and past the deadlines: where the receipts settle
    it, the verdict with a matching reading is the verdict without."""
    for responses, states, late in itertools.product(RESPONSES, STATES, (False, True)):
        e = Evidence(
            status=status,
            attempt=1,
            deadline_at=NOW - timedelta(seconds=1) if late else NOW + timedelta(seconds=5),
            acknowledged_at=NOW - timedelta(seconds=60 if late else 1),
            param_key="io1",
            target_value=True,
            responses=responses,
            states=states,
        )
        if not reading_may_decide(e):
            seen = replace(e, telemetry_reading="reading in telemetry 7 (True)")
            assert decide(seen, NOW, 30.0) == decide(e, NOW, 30.0), (responses, states)


def _dispatched(n: int, tag: str) -> list[DeviceCommand]:
    ids = _commands(_farms(n, tag))
    commands_dispatch(command_ids=ids, publish_many=_publish_many, trust_cache=False)
    return list(DeviceCommand.objects.filter(pk__in=ids).order_by("pk"))


def _relay_reports(commands: list[DeviceCommand], value: bool) -> None:
    """Each command's relay sends telemetry (no reply to the command itself)."""
    now = timezone.now()
    payload = json.dumps({"ts": now.isoformat(), "values": {"io1": value}})
    messages = [InboundTelemetry(c.target_serial_number, payload, now) for c in commands]
    telemetry_ingest(messages=messages)


@pytest.mark.parametrize("size", [1, 50])
def test_a_reading_alone_applies_its_commands_through_the_hot_path(size: int) -> None:
    commands = _dispatched(size, f"rd{size}")
    _relay_reports(commands, True)
    with statements_counted() as count:
        reached = commands_reconcile(command_ids=[c.pk for c in commands])
    assert set(reached.values()) == {CommandStatus.APPLIED}
    assert orm_statements(count) == []
    assert sum(TELEMETRY in s for s in count.hot) == 1
    applied = DeviceCommand.objects.filter(pk__in=reached)
    assert {c.status_reason for c in applied} == {"telemetry_matched"}


def test_a_batch_settled_by_its_receipts_reads_no_telemetry() -> None:
    ids = _answered(_farms(3, "rs"))  # acknowledged and reported applied
    with statements_counted() as count:
        reached = commands_reconcile(command_ids=ids)
    assert set(reached.values()) == {CommandStatus.APPLIED}
    assert not [s for s in count.hot if TELEMETRY in s]


def test_a_reading_of_another_value_proves_nothing() -> None:
    commands = _dispatched(2, "rn")
    _relay_reports(commands, False)
    reached = commands_reconcile(command_ids=[c.pk for c in commands])
    assert set(reached.values()) == {CommandStatus.DISPATCHED}


@pytest.mark.postgres
def test_the_telemetry_read_is_served_by_an_index() -> None:
    """As ``test_batch_cost.test_every_hot_statement_is_served_by_an_index``, for the read
    its crossing (settled by a state report) no longer sends."""
    commands = _dispatched(3, "ri")
    _relay_reports(commands, True)
    with CaptureQueriesContext(connection) as queries:
        commands_reconcile(command_ids=[c.pk for c in commands])
    reads = [q["sql"] for q in queries.captured_queries if TELEMETRY in q["sql"]]
    assert len(reads) == 1
    with connection.cursor() as cursor:
        cursor.execute("SET LOCAL enable_seqscan = off")
        cursor.execute(f"EXPLAIN {reads[0]}")
        plan = "\n".join(row[0] for row in cursor.fetchall())
    assert f"Seq Scan on {TELEMETRY}" not in plan, plan
