"""Reconcile's hand-written statements read and delete what the ORM did: each command with
its receipts as the device sent them (``automation.services.reconcile_sql``), the cool-downs
of the pairs that applied in one statement for the batch (``automation.services.cooldown``),
and the stage times of the applied commands (``automation.services.latency``)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from automation.keys import target_value_key
from automation.models import CommandCooldown, DeviceCommand, DeviceCommandReceipt
from automation.services.cooldown import command_cooldowns_clear
from automation.services.latency import StageTimes, command_stage_times
from automation.services.reconcile import commands_reconcile
from automation.services.reconcile_sql import commands_lock_read
from common.hot_sql import statements_counted
from tests.automation.conftest import make_intent
from tests.automation.test_batch_cost import _farms
from tests.automation.test_hot_path import _answered
from tests.devices.factories import make_farm

pytestmark = pytest.mark.django_db


def _commands(n: int, tag: str) -> list[DeviceCommand]:
    """One pending command per farm, on its heater."""
    ts = (timezone.now() - timedelta(seconds=5)).isoformat()
    kits = [make_farm(prefix=f"{tag}{i}") for i in range(n)]
    for kit in kits:
        kit.rule(threshold_value=30, target_value=True)
    return [make_intent(kit, ts=ts) for kit in kits]


def _receipt(command: DeviceCommand, kind: str, seconds: int, *, mismatch: bool = False) -> None:
    DeviceCommandReceipt.objects.create(
        command=command,
        device=command.target_device,
        serial_number=command.target_serial_number,
        receipt_type=kind,
        payload={"kind": kind, "at": seconds},
        dedupe_key=f"{command.pk}-{kind}-{seconds}",
        attempt=1,
        mismatch=mismatch,
        received_at=timezone.now() + timedelta(seconds=seconds),
    )


def _cooldown(command: DeviceCommand, value: object) -> None:
    CommandCooldown.objects.create(
        target_device_endpoint_id=command.target_device_endpoint_id,
        value_key=target_value_key(value),
        target_value=value,
        until=timezone.now() + timedelta(minutes=5),
        command=command,
        reason_code="invalid_param",
        updated_at=timezone.now(),
    )


def test_each_command_comes_with_its_receipts_in_the_order_received() -> None:
    answered, silent = _commands(2, "r")
    _receipt(answered, "state_report", 2)
    _receipt(answered, "rpc_ack", 1)
    _receipt(answered, "rpc_ack", 3, mismatch=True)  # another device's topic: no evidence
    rows = commands_lock_read([silent.pk, answered.pk, silent.pk, -1])
    assert [r.command.pk for r in rows] == sorted([answered.pk, silent.pk])
    by_pk = {r.command.pk: r for r in rows}
    assert [(r.kind, r.payload) for r in by_pk[answered.pk].receipts] == [
        ("rpc_ack", {"kind": "rpc_ack", "at": 1}),
        ("state_report", {"kind": "state_report", "at": 2}),
    ]
    assert by_pk[silent.pk].receipts == []
    read = by_pk[answered.pk].command
    assert read.target_device_endpoint.profile_endpoint.key == "io1"
    assert (read.target_value, read.command_params) == (
        answered.target_value,
        answered.command_params,
    )
    assert by_pk[answered.pk].receipts[0].received_at < by_pk[answered.pk].receipts[1].received_at


def test_the_cooldowns_of_applied_pairs_go_in_one_statement() -> None:
    one, other = _commands(2, "c")
    _cooldown(one, True)
    _cooldown(other, True)
    _cooldown(one, False)  # another value of the same endpoint: still cooling down
    pairs = [(one.target_device_endpoint_id, True), (other.target_device_endpoint_id, True)]
    with statements_counted() as count:
        assert command_cooldowns_clear([*pairs, pairs[0]]) == 2
    assert (len(count.hot), count.orm) == (1, [])
    left = CommandCooldown.objects.get()
    assert (left.target_device_endpoint_id, left.target_value) == (
        one.target_device_endpoint_id,
        False,
    )


def test_the_stage_times_are_read_in_one_statement_as_the_orm_reads_them() -> None:
    applied = _answered(_farms(2, "t"))
    commands_reconcile(command_ids=applied)
    pending = [c.pk for c in _commands(1, "tp")]
    ids = [*applied, *pending, -1]
    with statements_counted() as count:
        times = command_stage_times(command_ids=ids)
    assert (len(count.hot), count.orm) == (1, [])
    through_orm = DeviceCommand.objects.filter(pk__in=ids).values_list(
        "pk",
        "rule_execution__event__source_telemetry__received_at",
        "rule_execution__event__created_at",
        "created_at",
        "first_dispatched_at",
        "acknowledged_at",
        "applied_at",
    )
    assert times == {row[0]: StageTimes(*row) for row in through_orm}
    assert all(times[pk].applied_at is not None for pk in applied)
    assert times[pending[0]].published_at is None
