"""Outcomes that match the device: a refusal is final, telemetry proves only a change seen
after the request, a state report updates what the endpoint reports, a device that cannot
obey is cooled down instead of stormed. On the database, through the services."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from automation.models import (
    AutomationRuleExecution,
    CommandCooldown,
    DeviceCommand,
)
from automation.services.dispatch import command_dispatch
from automation.services.evaluate import endpoint_events_evaluate
from automation.services.ingest import telemetry_ingest
from automation.services.reconcile import command_reconcile
from devices.mqtt.messages import InboundTelemetry
from tests.automation.conftest import reply
from tests.devices.factories import FarmKit, make_farm

pytestmark = pytest.mark.django_db

_clock = {"s": 0}


def _ts() -> str:
    """Strictly increasing device times, so every reading is the newest one."""
    _clock["s"] += 1
    at = timezone.now().replace(microsecond=0) - timedelta(minutes=30)
    return (at + timedelta(seconds=_clock["s"])).isoformat().replace("+00:00", "Z")


def _telemetry(serial: str, **values: Any) -> list[int]:
    payload = json.dumps({"ts": _ts(), "values": values})
    return telemetry_ingest(
        messages=[InboundTelemetry(serial, payload, timezone.now())]
    ).pending_event_ids


def _reading(kit: FarmKit, temp: float) -> list[int]:
    """A sensor reading, evaluated; returns the intents created for it."""
    return endpoint_events_evaluate(
        event_ids=_telemetry(kit.sensor.serial_number, temp=temp)
    ).pending_command_ids


def _relay(kit: FarmKit, **values: Any) -> None:
    """The relay's ordinary telemetry; commands it may prove are reconciled."""
    _telemetry(kit.actuator.serial_number, **values)
    for intent in DeviceCommand.objects.filter(status__in=["dispatched", "acknowledged"]):
        command_reconcile(command_id=intent.pk)


def _dispatch(intent_id: int) -> DeviceCommand:
    sent: list[str] = []
    outcome = command_dispatch(
        command_id=intent_id,
        publish=lambda topic, body: sent.append(topic) or len(sent),
        trust_cache=False,  # on_commit hooks (which clear the cache marker) wait for commit
    )
    assert sent, f"the request was not published: {outcome}"
    return DeviceCommand.objects.get(pk=intent_id)


def _device_says(intent: DeviceCommand, kind: str, body: dict[str, Any]) -> str:
    moved = reply(intent, kind, {"commandId": intent.device_command_id, **body})
    intent.refresh_from_db()
    return f"{moved.status}/{moved.status_reason}"


def _refuse(intent: DeviceCommand, code: str = "invalid_param") -> str:
    return _device_says(intent, "rpc_response", {"status": "rejected", "resultCode": code})


def _ack(intent: DeviceCommand) -> str:
    return _device_says(intent, "rpc_response", {"status": "accepted", "resultCode": "ok"})


def _state(intent: DeviceCommand, value: Any) -> str:
    applied_at = timezone.now().isoformat().replace("+00:00", "Z")
    return _device_says(intent, "state", {"reportedState": {"io1": value}, "appliedAt": applied_at})


def _vent(kit: FarmKit) -> None:
    kit.rule(operator="gt", threshold_value=30, target_value=True)
    kit.rule(operator="lt", threshold_value=18, target_value=False)


def _outcomes() -> list[str]:
    return [
        f"{outcome}/{reason}" if reason else outcome
        for outcome, reason in AutomationRuleExecution.objects.order_by("pk").values_list(
            "outcome", "failure_reason"
        )
    ]


# --- 1. an explicit refusal outranks a coincidental reading ---------------------------------


def test_the_field_case_a_refused_command_stays_failed_when_telemetry_agrees() -> None:
    """Relay reports off; an "on" waits unsent; the cool reading asks for off, which the relay
    already holds: nothing is sent. And a refused command stays failed whatever follows."""
    kit = make_farm()
    _vent(kit)
    _relay(kit, io1=False)
    [on] = _reading(kit, 31)  # unsent: its dispatch worker is down
    assert _reading(kit, 12) == []  # off is what the relay reports: nothing to send
    assert _outcomes()[-1] == "already_in_state"
    first = DeviceCommand.objects.get(pk=on)
    assert (first.status, first.status_reason) == ("expired", "superseded")
    # The refusal itself: a command for "on" refused, then telemetry that happens to agree.
    [again] = _reading(kit, 33)
    intent = _dispatch(again)
    assert _refuse(intent) == "failed/invalid_param"
    _relay(kit, io1=True)  # a coincidental reading of the target value
    intent.refresh_from_db()
    assert (intent.status, intent.status_reason) == ("failed", "invalid_param")


def test_telemetry_of_the_value_reported_before_the_command_proves_nothing() -> None:
    kit = make_farm()
    kit.rule(operator="gt", threshold_value=30, target_value=True)
    _relay(kit, io1=False)
    [pk] = _reading(kit, 31)
    intent = _dispatch(pk)
    assert intent.prior_value is False and intent.prior_value_at is not None
    _relay(kit, io1=False)  # the relay's routine report, unchanged
    assert _ack(intent) == "acknowledged/acknowledged"
    _relay(kit, io1=True)  # the change the command asked for
    intent.refresh_from_db()
    assert (intent.status, intent.status_reason) == ("applied", "telemetry_matched")
    detail = intent.transitions.get(to_status="applied").detail
    assert detail.startswith("reading ") and "True" in detail  # which reading proved it


def test_a_reading_received_before_the_request_was_published_proves_nothing() -> None:
    """The bridge received it before the publish; a backlog made ingest store it after."""
    kit = make_farm()
    kit.rule(operator="gt", threshold_value=30, target_value=True)
    [pk] = _reading(kit, 31)
    intent = _dispatch(pk)
    received = timezone.now() - timedelta(seconds=5)
    payload = json.dumps({"ts": _ts(), "values": {"io1": True}})
    telemetry_ingest(messages=[InboundTelemetry(kit.actuator.serial_number, payload, received)])
    assert command_reconcile(command_id=intent.pk) == "dispatched"


def test_a_command_whose_target_the_device_already_reported_needs_a_state_report() -> None:
    """When the prior report equals the target, no reading can tell this command's effect."""
    kit = make_farm()
    kit.rule(operator="gt", threshold_value=30, target_value=True)
    [pk] = _reading(kit, 31)
    intent = _dispatch(pk)
    # As if the relay had reported "on" just before the request went out.
    DeviceCommand.objects.filter(pk=pk).update(prior_value=True, prior_value_at=timezone.now())
    _relay(kit, io1=True)
    assert command_reconcile(command_id=intent.pk) == "dispatched"
    assert _state(intent, True) == "applied/state_reported"


# --- 4. the endpoint knows what the device last reported --------------------------------


def test_a_state_report_updates_the_endpoint_so_the_next_reading_sends_nothing() -> None:
    kit = make_farm()
    kit.rule(operator="gt", threshold_value=30, target_value=True)
    [pk] = _reading(kit, 31)
    intent = _dispatch(pk)
    assert _state(intent, True) == "applied/state_reported"
    kit.io1.refresh_from_db()
    assert kit.io1.last_value is True and kit.io1.last_value_at is not None
    assert _reading(kit, 32) == []  # right after, before the relay's next telemetry
    assert _outcomes()[-1] == "already_in_state"
    assert DeviceCommand.objects.count() == 1


def test_an_older_state_report_does_not_overwrite_newer_telemetry() -> None:
    kit = make_farm()
    kit.rule(operator="gt", threshold_value=30, target_value=True)
    [pk] = _reading(kit, 31)
    intent = _dispatch(pk)
    future = (timezone.now() + timedelta(seconds=60)).isoformat().replace("+00:00", "Z")
    payload = json.dumps({"ts": future, "values": {"io1": False}})
    telemetry_ingest(
        messages=[InboundTelemetry(kit.actuator.serial_number, payload, timezone.now())]
    )
    _state(intent, True)
    kit.io1.refresh_from_db()
    assert kit.io1.last_value is False  # the newer reading (by device time) stands


# --- 3. no command storm on a target that cannot obey -----------------------------------


def _failed_once(kit: FarmKit) -> DeviceCommand:
    [pk] = _reading(kit, 31)
    intent = _dispatch(pk)
    assert _refuse(intent) == "failed/invalid_param"
    return intent


def test_a_refused_pair_is_suppressed_with_the_failing_command() -> None:
    kit = make_farm()
    kit.rule(operator="gt", threshold_value=30, target_value=True)
    failed = _failed_once(kit)
    for temp in (32, 33, 34):
        assert _reading(kit, temp) == []
    execution = AutomationRuleExecution.objects.order_by("pk").last()
    assert execution is not None
    assert (execution.outcome, execution.failure_reason) == ("suppressed", "cooldown")
    assert execution.suppressed_by_id == failed.pk
    assert DeviceCommand.objects.count() == 1
    cooldown = CommandCooldown.objects.get()
    assert (cooldown.failures, cooldown.command_id) == (1, failed.pk)


def test_the_cooldown_grows_per_consecutive_failure_and_ends(settings, time_machine) -> None:
    settings.COMMAND_COOLDOWN_S = (60.0, 300.0, 1800.0)
    settings.DEVICE_FRESHNESS_S = 10**6  # the relay stays "online" across the jumps
    time_machine.move_to(timezone.now(), tick=True)
    kit = make_farm()
    kit.rule(operator="gt", threshold_value=30, target_value=True)
    _failed_once(kit)
    lengths = []
    for _ in range(3):
        cooldown = CommandCooldown.objects.get()
        lengths.append(round((cooldown.until - cooldown.updated_at).total_seconds()))
        assert _reading(kit, 31) == []  # still cooling down
        time_machine.shift(timedelta(seconds=lengths[-1] + 1))
        _failed_once(kit)
    assert lengths == [60, 300, 1800]
    assert CommandCooldown.objects.get().failures == 4


def test_an_applied_command_of_the_pair_clears_the_cooldown() -> None:
    kit = make_farm()
    kit.rule(operator="gt", threshold_value=30, target_value=True)
    _failed_once(kit)
    CommandCooldown.objects.update(until=timezone.now())  # cooled down
    [pk] = _reading(kit, 31)
    assert _state(_dispatch(pk), True) == "applied/state_reported"
    assert not CommandCooldown.objects.exists()


def test_a_change_in_the_reported_state_lifts_the_cooldown() -> None:
    kit = make_farm()
    kit.rule(operator="gt", threshold_value=30, target_endpoint=kit.fan, target_value=80)
    _relay(kit, fan=0)
    [pk] = _reading(kit, 31)
    assert _refuse(_dispatch(pk)) == "failed/invalid_param"
    assert _reading(kit, 31) == []
    _relay(kit, fan=10)  # someone turned the fan by hand: the device moves, it may obey now
    assert len(_reading(kit, 31)) == 1


@pytest.mark.parametrize("edit", ["rule", "target"])
def test_an_edit_of_the_rule_or_the_target_lifts_the_cooldown(edit: str) -> None:
    kit = make_farm()
    rule = kit.rule(operator="gt", threshold_value=30, target_value=True)
    _failed_once(kit)
    assert _reading(kit, 31) == []
    if edit == "rule":
        rule.name = "Vent on (fixed binding)"
        rule.save()
    else:
        kit.io1.rpc_param_key_override = "io1"
        kit.io1.save()
    assert len(_reading(kit, 31)) == 1


def test_an_uncertain_command_cools_its_pair_down_too() -> None:
    kit = make_farm()
    kit.rule(operator="gt", threshold_value=30, target_value=True)
    [pk] = _reading(kit, 31)
    intent = _dispatch(pk)
    assert _state(intent, False) == "uncertain/state_mismatch"  # a wrong value applied
    assert _reading(kit, 31) == []
    assert _outcomes()[-1] == "suppressed/cooldown"


def test_a_cooldown_holds_only_its_value() -> None:
    kit = make_farm()
    kit.rule(operator="gt", threshold_value=30, target_endpoint=kit.fan, target_value=80)
    kit.rule(operator="lt", threshold_value=18, target_endpoint=kit.fan, target_value=20)
    [pk] = _reading(kit, 31)
    assert _refuse(_dispatch(pk)) == "failed/invalid_param"
    assert _reading(kit, 31) == []  # fan=80 cools down ...
    assert len(_reading(kit, 12)) == 1  # ... fan=20 is another pair


def test_a_support_retry_lifts_the_cooldown() -> None:
    from automation.services.support import command_retry

    kit = make_farm()
    kit.rule(operator="gt", threshold_value=30, target_value=True)
    failed = _failed_once(kit)
    assert _reading(kit, 31) == []
    retry = command_retry(command_id=failed.pk, actor="sam", reason="firmware updated")
    assert retry.created and not CommandCooldown.objects.exists()
    assert _refuse(_dispatch(retry.command.pk)) == "failed/invalid_param"
    assert CommandCooldown.objects.get().failures == 1  # a new chain after the retry


def test_cooldowns_are_visible_in_metrics_diagnostics_and_the_admin(client, monkeypatch) -> None:
    from io import StringIO

    from django.contrib.auth.models import User
    from django.core.management import call_command
    from prometheus_client.parser import text_string_to_metric_families

    from automation.tasks import endpoint_events_evaluate_task

    kit = make_farm(prefix="cool")
    kit.rule(operator="gt", threshold_value=30, target_value=True)
    failed = _failed_once(kit)
    endpoint_events_evaluate_task(_telemetry(kit.sensor.serial_number, temp=35))
    assert _outcomes()[-1] == "suppressed/cooldown"

    monkeypatch.delenv("PROMETHEUS_MULTIPROC_DIR", raising=False)
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(client.get("/metrics").content.decode())
        for s in family.samples
    }
    assert samples[("farm_command_cooldowns", ())] == 1
    assert samples[("farm_rule_decisions_total", (("outcome", "suppressed"),))] >= 1

    out = StringIO()
    call_command("diagnostics", stdout=out)
    text = out.getvalue()
    assert "Cool-downs: 1 target(s) cooling down, 1 decision(s) suppressed" in text
    assert "cool-relay" in text and "invalid_param" in text and str(failed.pk) in text

    User.objects.create_superuser("support", "s@example.com", "pw")
    client.login(username="support", password="pw")
    page = client.get("/admin/automation/commandcooldown/?cooling=yes")
    assert page.status_code == 200 and "cool-relay" in page.content.decode()
    assert (
        "cool-relay"
        not in client.get("/admin/automation/commandcooldown/?cooling=no").content.decode()
    )
    listed = client.get("/admin/automation/automationruleexecution/?outcome=suppressed")
    assert listed.status_code == 200 and "cooldown" in listed.content.decode()


def test_a_command_applied_while_evaluation_waited_for_the_lock_is_not_mistaken(
    monkeypatch,
) -> None:
    """Found by the chaos suite: the target's reported value was read with the rules, before
    the lock; a command that applied meanwhile was gone from the live ones, and the stale
    value made the decision ``already_in_state`` while the device held the other value."""
    from automation.services import evaluate

    kit = make_farm()
    _vent(kit)
    [on] = _reading(kit, 31)
    assert _state(_dispatch(on), True) == "applied/state_reported"
    [off] = _reading(kit, 12)
    off_intent = _dispatch(off)  # on its way to the relay
    real_lock = evaluate.targets_lock

    def lock_while_the_relay_answers(endpoint_ids: Any) -> None:
        real_lock(endpoint_ids)
        _state(off_intent, False)  # reconciled by another worker meanwhile

    monkeypatch.setattr(evaluate, "targets_lock", lock_while_the_relay_answers)
    assert len(_reading(kit, 33)) == 1  # the relay is off now: "on" must be sent again
    off_intent.refresh_from_db()
    assert off_intent.status == "applied"


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_a_command_replaced_while_the_dispatcher_claims_it_never_goes_out(monkeypatch) -> None:
    """Found by the chaos suite: evaluation read a command as never sent and replaced it
    (``already_in_state``), but a dispatcher claimed it in between, so the device ended in
    the replaced command's state. The first claim waits for the endpoint's evaluation lock."""
    import threading
    import time

    from django.db import connection

    from automation.services import evaluate

    kit = make_farm()
    _vent(kit)
    _relay(kit, io1=False)
    [on] = _reading(kit, 31)  # never sent
    real_lock = evaluate.targets_lock
    locked = threading.Event()

    def slow_lock(endpoint_ids: Any) -> None:
        real_lock(endpoint_ids)
        locked.set()
        time.sleep(0.5)  # the dispatcher tries to claim now

    monkeypatch.setattr(evaluate, "targets_lock", slow_lock)
    sent: list[str] = []

    def dispatcher() -> None:
        try:
            locked.wait(5)
            command_dispatch(
                command_id=on,
                publish=lambda topic, body: sent.append(topic) or 1,
                trust_cache=False,
            )
        finally:
            connection.close()

    thread = threading.Thread(target=dispatcher)
    thread.start()
    assert _reading(kit, 12) == []  # off: the relay holds it, the unsent "on" is replaced
    thread.join(10)
    assert sent == []
    intent = DeviceCommand.objects.get(pk=on)
    assert (intent.status, intent.status_reason) == ("expired", "superseded")


def test_telemetry_the_device_sends_before_the_brokers_puback_proves_the_command() -> None:
    """A fast relay switches and reports while the dispatcher still waits for the PUBACK:
    that reading came after the request went out, so it proves the command."""
    kit = make_farm()
    kit.rule(operator="gt", threshold_value=30, target_value=True)
    [pk] = _reading(kit, 35)

    def publish(topic: str, body: bytes) -> int:
        _telemetry(kit.actuator.serial_number, io1=True)
        return 1

    command_dispatch(command_id=pk, publish=publish, trust_cache=False)
    command_reconcile(command_id=pk)
    intent = DeviceCommand.objects.get(pk=pk)
    assert (intent.status, intent.status_reason) == ("applied", "telemetry_matched")
