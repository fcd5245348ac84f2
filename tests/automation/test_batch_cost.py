"""Cost per batch, not per command: every stage spends the same number of SQL statements on a
batch of one as on a batch of fifty (docs/architecture.md, "Set-based stages"). Each batch
here is one crossing per farm, the shape the pipeline sees under load."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from automation.models import DeviceCommand
from automation.services.dispatch import commands_dispatch
from automation.services.evaluate import endpoint_events_evaluate
from automation.services.ingest import telemetry_ingest
from automation.services.receipts import device_messages_record
from automation.services.reconcile import commands_reconcile
from automation.services.rule_cache import endpoints_read
from automation.states import CommandStatus
from common.hot_sql import statements_counted
from devices.mqtt.messages import DeviceMessage, InboundTelemetry
from tests.devices.factories import FarmKit, make_farm

pytestmark = pytest.mark.django_db

SMALL, LARGE = 1, 50


def _farms(n: int, tag: str) -> list[FarmKit]:
    kits = [make_farm(prefix=f"{tag}{i}") for i in range(n)]
    for kit in kits:
        kit.rule(threshold_value=30, target_value=True)
    return kits


def _counted(fn: Callable[[], Any]) -> tuple[int, Any]:
    """Statements of both kinds: through the ORM and hand-written (``common.hot_sql``)."""
    with statements_counted() as counted:
        result = fn()
    return counted.total, result


def _publish_many(requests: Any) -> list[int | Exception]:
    return list(range(1, len(requests) + 1))


def _stages(kits: list[FarmKit]) -> dict[str, int]:
    """Statements per stage for one crossing on each farm, through to applied."""
    now = timezone.now()
    ts = (now - timedelta(seconds=5)).isoformat()
    messages = [
        InboundTelemetry(
            k.sensor.serial_number, json.dumps({"ts": ts, "values": {"temp": 35}}), now
        )
        for k in kits
    ]
    cost: dict[str, int] = {}
    # A worker has the rules loaded already (``automation.services.rule_cache``): the farms
    # made above moved the configuration version, so they are loaded before counting.
    endpoints_read()
    cost["ingest"], ingested = _counted(lambda: telemetry_ingest(messages=messages))
    events = ingested.pending_event_ids
    assert len(events) == len(kits)
    cost["evaluate"], evaluated = _counted(lambda: endpoint_events_evaluate(event_ids=events))
    intents = evaluated.pending_command_ids
    assert len(intents) == len(kits)
    cost["dispatch"], outcomes = _counted(
        lambda: commands_dispatch(
            command_ids=intents, publish_many=_publish_many, trust_cache=False
        )
    )
    assert set(outcomes.values()) == {"dispatched"}
    rows = DeviceCommand.objects.filter(pk__in=intents)
    replies = [
        DeviceMessage(
            i.target_serial_number,
            kind,
            json.dumps(body),
            timezone.now(),
        )
        for i in rows
        for kind, body in (
            (
                "rpc_response",
                {"commandId": i.device_command_id, "status": "accepted", "resultCode": "ok"},
            ),
            (
                "state",
                {
                    "commandId": i.device_command_id,
                    "reportedState": {"io1": True},
                    "appliedAt": timezone.now().isoformat(),
                },
            ),
        )
    ]
    cost["record replies"], answered = _counted(lambda: device_messages_record(messages=replies))
    cost["reconcile"], reached = _counted(lambda: commands_reconcile(command_ids=answered))
    assert set(reached.values()) == {CommandStatus.APPLIED}
    return cost


# Statements per batch, as this test counts them: inside the test's transaction, so a stage's
# own transaction shows as SAVEPOINT + RELEASE (a BEGIN and COMMIT when deployed). PostgreSQL
# adds the advisory lock of the targets in evaluation and in the first claim of dispatch.
# Evaluation reads the configuration version once per batch and no rule while it stays
# (``automation.services.rule_cache``); the silent watchdogs come from the same cache.
# Dispatch reads its commands with their targets, rules and endpoint holders in one statement
# (``automation.services.dispatch_sql``), where it took three before and the claim a fourth.
# Evaluation reads what each endpoint last reported together with its manual hold and its
# cool-downs in one statement (``automation.services.evaluate_sql``), where it took three; its
# inserts of executions and commands return what they made, so the read after each runs only
# when the insert met a row already there (a redelivery, a concurrent worker): four fewer.
# Ingest reads its devices with their endpoints in one statement (``devices.ingest_sql``),
# where it took two. Its touch returns which devices are not online, so the guarded UPDATE
# that brings them back runs only for those (none here: one statement fewer). Ingest reads the
# configuration version once per batch too (which endpoints' readings wait for evaluation),
# and names the commands its readings may prove in one statement: what the evaluate task did
# before, so the proof needs no evaluation. On PostgreSQL that read and the endpoints' last
# values are one statement (``automation.services.ingest_sql``; SQLite runs no UPDATE inside
# a WITH). Device replies read their commands with the devices' endpoints, which a state
# report's values are matched against, in one statement (``automation.services.receipts_sql``).
# Reconcile reads its commands, locked, with their targets and receipts in one statement
# (``automation.services.reconcile_sql``), where the ORM took two, and reads telemetry only
# for commands whose receipts leave a reading a say: here the state reports settle them.
# Commands move through their ledger (``common.ledger``): on PostgreSQL a move and its audit
# rows are one statement, so dispatch and reconcile each spend one fewer than the UPDATE and
# INSERT they took before; SQLite, which runs no UPDATE inside a WITH, still takes both.
STATEMENTS = {
    "postgresql": {"ingest": 8, "evaluate": 10, "dispatch": 7, "record replies": 5,
                   "reconcile": 5},
    "sqlite": {"ingest": 9, "evaluate": 9, "dispatch": 7, "record replies": 5,
               "reconcile": 6},
}  # fmt: skip


def test_each_stage_costs_the_same_statements_for_one_command_and_for_fifty() -> None:
    _stages(_farms(2, "warm"))  # first-use lookups (content types, caches) out of the way
    small = _stages(_farms(SMALL, "one"))
    large = _stages(_farms(LARGE, "many"))
    assert large == small, f"statements per batch: {SMALL} → {small}, {LARGE} → {large}"
    assert small == STATEMENTS[connection.vendor]


# Tables that grow with use: a plan that reads one of them end to end costs more every day.
GROWING = (
    "devices_telemetry",
    "devices_device",
    "devices_deviceinstanceendpoint",
    "devices_devicemessagerejection",
    "automation_automationendpointevent",
    "automation_automationruleexecution",
    "automation_automationcommandintent",
    "automation_commandtransition",
    "automation_devicecommandreceipt",
    "automation_commandcooldown",
)


@pytest.mark.postgres
def test_every_hot_statement_is_served_by_an_index() -> None:
    """Each statement of a batch, planned with sequential scans priced out: one that still
    scans a growing table has no index to use (the tables here are too small for the planner
    to prefer an index on its own)."""
    _stages(_farms(2, "warm"))
    kits = _farms(3, "plan")
    with CaptureQueriesContext(connection) as queries:
        _stages(kits)
    scans: list[str] = []
    with connection.cursor() as cursor:
        cursor.execute("SET LOCAL enable_seqscan = off")
        for query in queries.captured_queries:
            sql = query["sql"]
            if (
                not sql.lstrip()
                .upper()
                .startswith(("SELECT", "UPDATE", "DELETE", "WITH", "INSERT"))
            ):
                continue
            cursor.execute(f"EXPLAIN {sql}")
            plan = "\n".join(row[0] for row in cursor.fetchall())
            scans.extend(
                f"{table}: {sql[:160]}" for table in GROWING if f"Seq Scan on {table}" in plan
            )
    assert not scans, "\n".join(scans)
