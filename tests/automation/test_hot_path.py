"""Guard: the hot path's statements stay hand-written. Each stage listed in ``HOT_STAGES``
runs at a batch of one and of fifty, and every statement it sends must come through
``common.hot_sql`` (``statements_counted`` tells them apart); one that goes back through the
ORM fails the test with its SQL. Another stage joins the guard by adding its runner: one
that takes the farms' pending commands, or a ``Prepared`` one that builds its own input."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import pytest
from django.core.cache import cache
from django.test import TestCase
from django.utils import timezone

from automation.models import DeviceCommand
from automation.services.claim import commands_claim
from automation.services.dispatch import commands_dispatch
from automation.services.evaluate import endpoint_events_evaluate
from automation.services.ingest import telemetry_ingest
from automation.services.receipts import device_messages_record
from automation.services.reconcile import commands_reconcile
from automation.services.rule_cache import endpoints_read, rule_set
from automation.states import CommandStatus
from common.hot_sql import StatementCount, statements_counted
from devices.directory import DeviceDirectory
from devices.mqtt.messages import DeviceMessage, InboundTelemetry
from tests.automation.conftest import make_intent
from tests.automation.test_batch_cost import _farms
from tests.devices.factories import FarmKit

pytestmark = pytest.mark.django_db

# What Django's transaction management sends itself: no query to hand-write.
TRANSACTION_CONTROL = ("SAVEPOINT", "RELEASE SAVEPOINT", "ROLLBACK TO SAVEPOINT")


def _commands(kits: list[FarmKit]) -> list[int]:
    """One pending command per farm, on its heater (as evaluation leaves them)."""
    ts = (timezone.now() - timedelta(seconds=5)).isoformat()
    return [make_intent(kit, ts=ts).pk for kit in kits]


def _dispatch(ids: list[int]) -> None:
    outcomes = commands_dispatch(
        command_ids=ids,
        publish_many=lambda requests: list(range(1, len(requests) + 1)),
        trust_cache=False,
    )
    assert set(outcomes.values()) == {"dispatched"}


def _claim(ids: list[int]) -> None:
    from automation.services.dispatch_sql import commands_read

    rows = commands_read(ids)
    holders = {r.command.target_device_endpoint_id: r.holder_id for r in rows if r.holder_id}
    claimed = commands_claim([r.command for r in rows], timezone.now(), {}, holders)
    assert len(claimed) == len(ids)


@dataclass(frozen=True)
class Prepared:
    """A stage whose input is not the farms' pending commands: ``prepare`` builds it from
    the farms before counting, ``run`` is counted."""

    prepare: Callable[[list[FarmKit]], Any]
    run: Callable[[Any], Any]


def _readings(kits: list[FarmKit]) -> list[InboundTelemetry]:
    """A stamped and an unstamped reading of each farm's sensor, the rules loaded already
    (as a worker has them: ``automation.services.rule_cache``)."""
    endpoints_read()
    now = timezone.now()
    ts = (now - timedelta(seconds=5)).isoformat()
    bodies = ({"ts": ts, "values": {"temp": 35}}, {"values": {"humidity": 50}})
    return [
        InboundTelemetry(k.sensor.serial_number, json.dumps(body), now)
        for k in kits
        for body in bodies
    ]


def _ingest(messages: list[InboundTelemetry]) -> None:
    result = telemetry_ingest(messages=messages)
    assert (result.telemetry, result.rejections) == (len(messages), 0)


def _ingest_with_directory(messages: list[InboundTelemetry]) -> None:
    """As the MQTT bridge ingests: its directory reads the devices (a new one: none kept)."""
    result = telemetry_ingest(messages=messages, directory=DeviceDirectory())
    assert (result.telemetry, result.rejections) == (len(messages), 0)


def _replies(kits: list[FarmKit]) -> list[DeviceMessage]:
    """An ack and a state report of each farm's command, dispatched. The first command's
    correlation is forgotten (the cache flushed after its dispatch), so it is read by its
    commandId and the others by their cached id."""
    ids = _commands(kits)
    _dispatch(ids[:1])
    cache.clear()
    if ids[1:]:
        _dispatch(ids[1:])
    now = timezone.now()
    messages = []
    for command in DeviceCommand.objects.filter(pk__in=ids).order_by("pk"):
        ack = {"commandId": command.device_command_id, "status": "accepted", "resultCode": "ok"}
        state = {
            "commandId": command.device_command_id,
            "reportedState": {"io1": True},
            "appliedAt": now.isoformat(),
        }
        for kind, body in (("rpc_response", ack), ("state", state)):
            messages.append(
                DeviceMessage(command.target_serial_number, kind, json.dumps(body), now)
            )
    return messages


def _record(messages: list[DeviceMessage]) -> None:
    assert len(device_messages_record(messages=messages)) == len(messages) // 2


def _events(kits: list[FarmKit]) -> list[int]:
    """One pending reading per farm that crosses its rule's threshold, the rules loaded (a
    worker has them cached: ``automation.services.rule_cache``)."""
    crossings = _readings(kits)[::2]  # each farm's stamped reading, past its threshold
    ids = telemetry_ingest(messages=crossings).pending_event_ids
    rule_set()
    return ids


def _evaluate(ids: list[int]) -> None:
    result = endpoint_events_evaluate(event_ids=ids)
    assert len(result.pending_command_ids) == len(ids)


def _answered(kits: list[FarmKit]) -> list[int]:
    """One command per farm, dispatched, acknowledged and reported applied by its device
    (as a reply's receipts leave them for reconcile)."""
    answered = device_messages_record(messages=_replies(kits))
    assert len(answered) == len(kits)
    return answered


def _reconcile(ids: list[int]) -> None:
    # With what a worker runs after the commit: the stage times of the applied commands.
    with TestCase.captureOnCommitCallbacks(execute=True) as after_commit:
        reached = commands_reconcile(command_ids=ids)
    assert set(reached.values()) == {CommandStatus.APPLIED}
    assert after_commit, "nothing ran after the commit"


HOT_STAGES: dict[str, Callable[[list[int]], Any] | Prepared] = {
    "dispatch": _dispatch,
    "claim": _claim,
    "ingest": Prepared(_readings, _ingest),
    "ingest through the directory": Prepared(_readings, _ingest_with_directory),
    "record replies": Prepared(_replies, _record),
    "reconcile": Prepared(_answered, _reconcile),
    "evaluate": Prepared(_events, _evaluate),
}


def orm_statements(count: StatementCount) -> list[str]:
    """The statements of ``count`` that went through the ORM, but transaction control."""
    return [s for s in count.orm if not s.lstrip().upper().startswith(TRANSACTION_CONTROL)]


@pytest.mark.parametrize("stage", sorted(HOT_STAGES))
@pytest.mark.parametrize("size", [1, 50])
def test_every_hot_statement_comes_through_the_hot_path(stage: str, size: int) -> None:
    kits = _farms(size, f"hp{stage[:2]}{size}")
    runner = HOT_STAGES[stage]
    if isinstance(runner, Prepared):
        given, run = runner.prepare(kits), runner.run
    else:
        given, run = _commands(kits), runner
    with statements_counted() as count:
        run(given)
    assert count.hot, "the stage ran no statement at all"
    assert orm_statements(count) == [], f"{stage} at {size}: through the ORM"


def test_the_guard_sees_a_statement_that_goes_back_through_the_orm() -> None:
    """A regression would be caught: an ORM read inside the counted block is reported."""
    with statements_counted() as count:
        DeviceCommand.objects.filter(pk=-1).exists()
    assert len(orm_statements(count)) == 1
