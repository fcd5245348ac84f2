"""Manual control on the runtime path: an operator's command is a ``manual`` intent that passes
the rules' gates, follows latest-decision-wins and one live command per endpoint, is sent by
the normal dispatcher and applied only on the device's evidence; it holds the endpoint, so
rule decisions meanwhile end ``suppressed``/``manual_override``, until the hold expires or is
cancelled. Who asked and why are on the intent, its audit rows and its timeline."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from io import StringIO
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.core.management import call_command
from django.db import IntegrityError, connection, transaction
from django.db.models import F
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from automation.diagnostics import command_timeline, decisions_suppressed
from automation.models import (
    AutomationRuleExecution,
    CommandTransition,
    DeviceCommand,
    EndpointManualHold,
)
from automation.services.dispatch import command_dispatch
from automation.services.evaluate import endpoint_events_evaluate
from automation.services.ingest import telemetry_ingest
from automation.services.manual import (
    ManualCommand,
    ManualCommandRefused,
    endpoint_command_manual,
    endpoint_hold_cancel,
)
from automation.services.support import command_mark_failed, command_retry
from automation.states import CommandOrigin, CommandStatus, ReasonCode
from common.audit.models import AuditEntry
from devices.models import DeviceInstanceEndpoint, DeviceStatus, Farm
from devices.mqtt.messages import InboundTelemetry
from tests.automation.conftest import ack, dispatch, fake_publish, make_intent, state
from tests.devices.factories import FarmKit, make_farm

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("clock_at_fixture_dates")]

NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)


@pytest.fixture
def operator(db: None) -> User:
    return User.objects.create_user(username="olga", password="pw")


def _manual(
    kit: FarmKit,
    user: User,
    value: Any = False,
    *,
    endpoint: DeviceInstanceEndpoint | None = None,
    key: str | None = None,
    now: datetime | None = None,
) -> ManualCommand:
    return endpoint_command_manual(
        endpoint_id=(endpoint or kit.io1).pk,
        value=value,
        actor=user,
        reason="fan test before the harvest",
        request_key=key,
        now=now,
    )


def _send(intent: DeviceCommand) -> DeviceCommand:
    """Dispatch on the database's word alone (a test commits no on_commit release)."""
    command_dispatch(command_id=intent.pk, publish=fake_publish, trust_cache=False)
    return DeviceCommand.objects.get(pk=intent.pk)


def _crossing(kit: FarmKit, second: int = 0, temp: float = 31) -> list[int]:
    """A reading over the rule's threshold, evaluated; the pending intents it made."""
    payload = json.dumps({"ts": f"2026-11-29T11:59:{second:02d}Z", "values": {"temp": temp}})
    ids = telemetry_ingest(
        messages=[InboundTelemetry(kit.sensor.serial_number, payload, NOW)]
    ).pending_event_ids
    return endpoint_events_evaluate(event_ids=ids).pending_command_ids


def _statuses(kit: FarmKit) -> list[tuple[str, Any, str, str]]:
    rows = DeviceCommand.objects.filter(target_device=kit.actuator).order_by("pk")
    return list(rows.values_list("origin", "target_value", "status", "status_reason"))


def test_a_manual_command_is_a_manual_intent_sent_and_applied_like_a_rules(
    operator: User,
) -> None:
    kit = make_farm()
    before = timezone.now()
    result = _manual(kit, operator, True)
    intent = result.command
    assert result.created
    assert (intent.origin, intent.rule_id, intent.rule_execution_id) == ("manual", None, None)
    assert (intent.requested_by_id, intent.request_reason) == (
        operator.pk,
        "fan test before the harvest",
    )
    assert (intent.command_method, intent.command_params) == ("setIO", {"io1": True})
    assert intent.status == CommandStatus.PENDING_DISPATCH
    # Held for the farm's default 30 minutes.
    assert result.hold_until is not None
    held = (result.hold_until - before).total_seconds()
    assert 30 * 60 - 5 < held <= 30 * 60 + 5
    audit = CommandTransition.objects.get(command=intent)
    assert (audit.to_status, audit.reason_code) == ("pending_dispatch", "manual")
    assert "by olga: fan test before the harvest" in audit.detail
    # The normal dispatcher sends it; applied only on the device's word.
    sent = dispatch(intent)
    assert sent.status == CommandStatus.DISPATCHED and sent.device_command_id
    assert state(ack(sent), True).status == CommandStatus.APPLIED


def test_the_farms_override_period_sets_the_hold_and_zero_holds_nothing(operator: User) -> None:
    kit = make_farm()
    Farm.objects.filter(pk=kit.farm.pk).update(manual_override_minutes=5)
    now = timezone.now()
    assert _manual(kit, operator, now=now).hold_until == now + timedelta(minutes=5)
    Farm.objects.filter(pk=kit.farm.pk).update(manual_override_minutes=0)
    assert _manual(kit, operator, True).hold_until is None
    kit.rule(target_value=False)
    assert len(_crossing(kit)) == 1  # not held: the rule acts at once


@pytest.mark.parametrize(
    ("endpoint", "value", "field", "reason"),
    [
        ("temp", 20, "non_field_errors", ReasonCode.TARGET_NOT_WRITABLE),
        ("fan", 150, "value", ReasonCode.VALUE_OUT_OF_RANGE),
        ("fan", True, "value", ReasonCode.VALUE_WRONG_TYPE),
        ("mode", "turbo", "value", ReasonCode.VALUE_NOT_ALLOWED),
        ("io1", "on", "value", ReasonCode.VALUE_WRONG_TYPE),
    ],
)
def test_a_value_the_gates_refuse_writes_nothing(
    operator: User, endpoint: str, value: Any, field: str, reason: ReasonCode
) -> None:
    kit = make_farm()
    with pytest.raises(ManualCommandRefused) as refused:
        _manual(kit, operator, value, endpoint=getattr(kit, endpoint))
    assert (refused.value.field, refused.value.reason, refused.value.conflict) == (
        field,
        reason,
        False,
    )
    assert not DeviceCommand.objects.exists()
    assert not EndpointManualHold.objects.exists()


@pytest.mark.parametrize("status", [DeviceStatus.RETIRED, DeviceStatus.MAINTENANCE])
def test_a_retired_or_maintained_device_is_refused_as_a_conflict(
    operator: User, status: str
) -> None:
    kit = make_farm()
    kit.actuator.status = status
    kit.actuator.save()
    with pytest.raises(ManualCommandRefused) as refused:
        _manual(kit, operator)
    assert refused.value.conflict and refused.value.reason == f"target_{status}"
    assert not DeviceCommand.objects.exists()


def test_a_gate_failing_at_dispatch_fails_the_manual_command(operator: User) -> None:
    kit = make_farm()
    intent = _manual(kit, operator).command
    DeviceInstanceEndpoint.objects.filter(pk=kit.io1.pk).update(is_enabled=False)
    sent = dispatch(intent)
    assert (sent.status, sent.status_reason) == ("failed", "target_disabled")


def test_a_manual_command_supersedes_a_rule_command_never_sent(operator: User) -> None:
    kit = make_farm()
    kit.rule(target_value=True)
    rule_command = make_intent(kit)
    manual = _manual(kit, operator, False).command
    assert _statuses(kit) == [
        ("rule", True, "expired", "superseded"),
        ("manual", False, "pending_dispatch", ""),
    ]
    replaced = CommandTransition.objects.get(command=rule_command)
    assert replaced.detail == f"replaced by command {manual.pk}"


def test_a_manual_command_waits_behind_a_sent_rule_command_one_live_at_a_time(
    operator: User,
) -> None:
    kit = make_farm()
    kit.rule(target_value=True)
    rule_command = dispatch(make_intent(kit))
    manual = _manual(kit, operator, False).command
    assert _statuses(kit) == [
        ("rule", True, "dispatched", "dispatched"),
        ("manual", False, "pending_dispatch", ""),
    ]
    outcome = command_dispatch(command_id=manual.pk, publish=fake_publish, trust_cache=False)
    assert outcome == "endpoint_busy"
    assert DeviceCommand.objects.filter(inflight_endpoint=kit.io1).count() == 1
    state(ack(rule_command), True)  # the sent command ends: the endpoint is free
    sent = _send(manual)
    assert sent.status == CommandStatus.DISPATCHED
    assert state(ack(sent), False).status == CommandStatus.APPLIED
    assert DeviceInstanceEndpoint.objects.get(pk=kit.io1.pk).last_value is False


def test_a_newer_manual_command_replaces_an_unsent_one_and_moves_the_hold(
    operator: User,
) -> None:
    kit = make_farm()
    first = _manual(kit, operator, True).command
    other = User.objects.create_user(username="piet")
    second = _manual(kit, other, False).command
    assert _statuses(kit) == [
        ("manual", True, "expired", "superseded"),
        ("manual", False, "pending_dispatch", ""),
    ]
    hold = EndpointManualHold.objects.get(endpoint=kit.io1)
    assert (hold.command_id, hold.requested_by_id) == (second.pk, other.pk)
    assert first.pk != second.pk


def test_rule_decisions_during_the_hold_end_suppressed_manual_override(operator: User) -> None:
    kit = make_farm()
    rule = kit.rule(target_value=True)
    manual = _manual(kit, operator, False).command
    assert _crossing(kit, 0) == []
    assert _crossing(kit, 1, temp=35) == []
    executions = AutomationRuleExecution.objects.filter(rule=rule)
    assert set(executions.values_list("outcome", "failure_reason", "suppressed_by")) == {
        ("suppressed", "manual_override", manual.pk)
    }
    assert executions.count() == 2
    # Not counted as a cool-down's work in the diagnostics.
    assert decisions_suppressed(since=timezone.now() - timedelta(hours=1)) == 0
    # The manual command is still the endpoint's latest decision: nothing replaced it.
    assert _statuses(kit) == [("manual", False, "pending_dispatch", "")]


def test_after_the_hold_expires_rules_act_again(operator: User) -> None:
    kit = make_farm()
    kit.rule(target_value=True)
    _manual(kit, operator, False, now=timezone.now() - timedelta(minutes=31))
    (created,) = _crossing(kit)
    # Latest decision wins again: the rule's newer decision replaces the unsent manual one.
    assert _statuses(kit) == [
        ("manual", False, "expired", "superseded"),
        ("rule", True, "pending_dispatch", ""),
    ]
    assert DeviceCommand.objects.get(pk=created).origin == CommandOrigin.RULE


def test_a_cancelled_hold_lets_rules_act_again_and_is_audited(operator: User) -> None:
    kit = make_farm()
    kit.rule(target_value=True)
    manual = dispatch(_manual(kit, operator, False).command)
    assert _crossing(kit, 0) == []
    boss = User.objects.create_user(username="bea")
    assert endpoint_hold_cancel(endpoint_id=kit.io1.pk, actor=boss, reason="harvest is over")
    assert not endpoint_hold_cancel(endpoint_id=kit.io1.pk, actor=boss, reason="again")
    hold = EndpointManualHold.objects.get(endpoint=kit.io1)
    assert hold.cancelled_at is not None and hold.cancelled_by_id == boss.pk
    assert hold.cancel_reason == "harvest is over"
    # Audited where it happened, the hold; the command that held it did not move.
    entry = AuditEntry.objects.get_for_object(hold).order_by("pk").last()
    assert entry is not None and entry.changes["cancel_reason"] == ["", "harvest is over"]
    assert entry.changes["cancelled_by"][1] == str(boss.pk)
    assert not CommandTransition.objects.filter(command=manual, from_status=F("to_status"))
    # The manual command keeps its course (sent); the rule's new decision queues behind it.
    assert len(_crossing(kit, 1)) == 1
    assert _statuses(kit) == [
        ("manual", False, "dispatched", "dispatched"),
        ("rule", True, "pending_dispatch", ""),
    ]


def test_a_repeated_request_creates_no_second_intent(operator: User) -> None:
    kit = make_farm()
    first = _manual(kit, operator, True, key="req-1")
    again = _manual(kit, operator, True, key="req-1")
    assert first.created and not again.created
    assert again.command.pk == first.command.pk
    assert DeviceCommand.objects.count() == 1
    assert CommandTransition.objects.count() == 1
    assert again.hold_until == first.hold_until
    # Without a key (or with another one) each request is a new command.
    assert _manual(kit, operator, True).created
    assert DeviceCommand.objects.count() == 2


def test_a_support_retry_of_a_manual_command_stays_manual(operator: User) -> None:
    kit = make_farm()
    manual = dispatch(_manual(kit, operator, True).command)
    assert command_mark_failed(command_id=manual.pk, actor="sam", reason="stuck relay")
    retry = command_retry(command_id=manual.pk, actor="sam", reason="relay fixed").command
    assert (retry.origin, retry.rule_id, retry.rule_execution_id) == ("manual", None, None)
    assert retry.requested_by_id == operator.pk and retry.retry_of_id == manual.pk
    assert _send(retry).status == CommandStatus.DISPATCHED


def test_the_timeline_names_the_origin_and_who_asked(operator: User) -> None:
    kit = make_farm()
    intent = dispatch(_manual(kit, operator, True).command)
    timeline = command_timeline(command=intent)
    assert timeline.ids["origin"] == "manual" and timeline.ids["requestedBy"] == "olga"
    assert timeline.ids["ruleId"] is None and timeline.ids["eventId"] is None
    stages = [e.stage for e in timeline.entries]
    assert stages == ["command", "transition", "transition"]
    created, requested = timeline.entries[0], timeline.entries[1]
    assert created.what.startswith("manual command created")
    assert "asked by olga: fan test before the harvest" in created.detail
    assert requested.reason == "manual" and "by olga" in requested.detail
    out = StringIO()
    call_command("timeline", f"intent:{intent.pk}", stdout=out)
    printed = out.getvalue()
    assert "origin=manual" in printed and "requestedBy=olga" in printed
    assert "manual command created" in printed


def test_a_rule_timeline_names_its_origin_too() -> None:
    kit = make_farm()
    kit.rule()
    timeline = command_timeline(command=make_intent(kit))
    assert timeline.ids["origin"] == "rule" and timeline.ids["requestedBy"] is None
    assert [e.stage for e in timeline.entries] == ["telemetry", "event", "execution", "command"]


def test_the_database_refuses_a_rule_intent_without_its_rule(operator: User) -> None:
    kit = make_farm()
    kit.rule()
    intent = make_intent(kit)
    with pytest.raises(IntegrityError), transaction.atomic():
        DeviceCommand.objects.filter(pk=intent.pk).update(rule_execution=None)
    with pytest.raises(IntegrityError), transaction.atomic():
        DeviceCommand.objects.filter(pk=intent.pk).update(rule=None)
    manual = _manual(kit, operator).command
    with pytest.raises(IntegrityError), transaction.atomic():
        DeviceCommand.objects.filter(pk=manual.pk).update(origin=CommandOrigin.RULE)


def _counted(fn: Callable[[], Any]) -> tuple[int, Any]:
    with CaptureQueriesContext(connection) as queries:
        result = fn()
    return len(queries.captured_queries), result


def _held_batch(n: int, tag: str, user: User) -> int:
    """Statements to evaluate one crossing on each of ``n`` farms whose targets are held."""
    kits = [make_farm(prefix=f"{tag}{i}") for i in range(n)]
    for kit in kits:
        kit.rule(target_value=True)
        _manual(kit, user, False)
    payload = json.dumps({"ts": "2026-11-29T11:59:00Z", "values": {"temp": 31}})
    events = telemetry_ingest(
        messages=[InboundTelemetry(k.sensor.serial_number, payload, NOW) for k in kits]
    ).pending_event_ids
    cost, result = _counted(lambda: endpoint_events_evaluate(event_ids=events))
    assert result.pending_command_ids == []
    assert result.outcomes == {"suppressed": n}
    return cost


def test_holds_cost_one_query_per_batch_whatever_its_size(operator: User) -> None:
    _held_batch(2, "warm", operator)
    assert _held_batch(1, "one", operator) == _held_batch(20, "many", operator)


def test_a_manual_command_costs_the_same_whatever_the_endpoints_history(
    operator: User,
) -> None:
    """Each request replaces the one unsent command before it: the same statements each time."""
    kit = make_farm()
    _manual(kit, operator, False)
    first, _ = _counted(lambda: _manual(kit, operator, True))
    for value in (False, True, False, True, False):
        _manual(kit, operator, value)
    later, _ = _counted(lambda: _manual(kit, operator, True))
    assert later == first


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_a_manual_command_racing_a_rule_decision_wins_whatever_the_order() -> None:
    """Run together on two connections, the decision and the manual command serialise on the
    target's lock: either the manual command replaces the rule's unsent one, or the hold it
    set suppresses the decision. The endpoint ends with the manual command as its only live
    one."""
    user = User.objects.create_user(username="racer")
    for _ in range(8):  # several rounds: races are probabilistic
        kit = make_farm()
        kit.rule(target_value=True)
        payload = json.dumps({"ts": "2026-11-29T11:59:00Z", "values": {"temp": 31}})
        events = telemetry_ingest(
            messages=[InboundTelemetry(kit.sensor.serial_number, payload, NOW)]
        ).pending_event_ids
        barrier = threading.Barrier(2)
        errors: list[BaseException] = []

        def run(
            job: Callable[[], Any],
            barrier: threading.Barrier = barrier,
            errors: list[BaseException] = errors,
        ) -> None:
            try:
                barrier.wait()
                job()
            except BaseException as exc:  # pragma: no cover - reported below
                errors.append(exc)
            finally:
                connection.close()

        jobs: list[Callable[[], Any]] = [
            lambda events=events: endpoint_events_evaluate(event_ids=events),
            lambda kit=kit: _manual(kit, user, False),
        ]
        threads = [threading.Thread(target=run, args=(job,)) for job in jobs]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert errors == []
        live = DeviceCommand.objects.filter(
            target_device=kit.actuator, status__in=["pending_dispatch"]
        )
        assert list(live.values_list("origin", "target_value")) == [("manual", False)]
