"""Support's manual retry of an ended command: the ended intent stays as it was (history is
never rewritten); one new pending intent for the same target and value is created in the same
rule execution, with its own idempotency key and, once dispatched, its own commandId. A repeat
click creates nothing more, a live command is refused, and the who and why are audited."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import Permission, User
from django.db.models import F
from django.test import Client
from rest_framework.test import APIClient

from automation.models import CommandTransition, DeviceCommand
from automation.services import support
from automation.services.commands import command_transition
from automation.services.dispatch import command_dispatch
from automation.services.support import CommandRetryRefused, command_retry
from automation.states import CommandStatus, ReasonCode
from config.task_names import COMMANDS_DISPATCH
from scheduler.services.support import SupportReasonMissing
from tests.automation.conftest import dispatch, fake_publish, make_intent, time_out
from tests.common.auth import token_client
from tests.conftest import Tenant

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("clock_at_fixture_dates")]
INTENT_URL = "/admin/automation/devicecommand/"


def _expired(kit: Any) -> DeviceCommand:
    """A command that was sent, timed out, and ran out of budget."""
    kit.rule()
    intent = time_out(dispatch(make_intent(kit)))
    assert intent.status == CommandStatus.RETRYING
    assert command_transition(intent, CommandStatus.EXPIRED, ReasonCode.RETRY_BUDGET_EXHAUSTED)
    return DeviceCommand.objects.get(pk=intent.pk)


def _retries(intent: DeviceCommand) -> list[DeviceCommand]:
    return list(DeviceCommand.objects.filter(retry_of=intent).order_by("pk"))


def test_retry_of_an_expired_intent_is_one_new_pending_command(
    tenants: tuple[Tenant, Tenant],
    monkeypatch: pytest.MonkeyPatch,
    django_capture_on_commit_callbacks: Any,
) -> None:
    original = _expired(tenants[0].kit)
    nudged: list[tuple[str, list[int]]] = []
    monkeypatch.setattr(
        "automation.services.spine.enqueue", lambda name, ids: nudged.append((name, ids))
    )
    with django_capture_on_commit_callbacks(execute=True):
        result = command_retry(command_id=original.pk, actor="sam", reason="relay replaced")
    new = result.command
    assert result.created and new.pk != original.pk
    assert new.retry_of_id == original.pk
    assert new.rule_execution_id == original.rule_execution_id
    assert new.status == CommandStatus.PENDING_DISPATCH and new.attempt_count == 0
    assert new.idempotency_key != original.idempotency_key
    assert (new.target_device_endpoint_id, new.target_value) == (
        original.target_device_endpoint_id,
        original.target_value,
    )
    assert new.device_command_id is None
    assert nudged == [(COMMANDS_DISPATCH, [new.pk])]
    # The original stays expired and unaudited (nothing moved it); the retry's first audit
    # row names it and who asked why.
    kept = DeviceCommand.objects.get(pk=original.pk)
    assert (kept.status, kept.version) == (CommandStatus.EXPIRED, original.version)
    assert not CommandTransition.objects.filter(command=original, from_status=F("to_status"))
    audit = CommandTransition.objects.get(command=new)
    assert audit.reason_code == ReasonCode.MANUAL
    assert (audit.from_status, audit.to_status) == ("", CommandStatus.PENDING_DISPATCH)
    assert audit.detail == f"retry of command {original.pk} by sam: relay replaced"
    # The execution still answers with its original command.
    assert original.rule_execution.command == original
    assert original.rule_execution.commands.count() == 2
    # Dispatch gives the new attempt a new commandId: a new command for the device.
    command_dispatch(command_id=new.pk, publish=fake_publish, trust_cache=False)
    new.refresh_from_db()
    assert new.status == CommandStatus.DISPATCHED
    assert new.device_command_id and new.device_command_id != original.device_command_id


def test_a_double_submit_creates_one_retry(tenants: tuple[Tenant, Tenant]) -> None:
    original = _expired(tenants[0].kit)
    first = command_retry(command_id=original.pk, actor="sam", reason="try again")
    again = command_retry(command_id=original.pk, actor="sam", reason="try again")
    assert first.created and not again.created
    assert again.command.pk == first.command.pk
    assert [r.pk for r in _retries(original)] == [first.command.pk]
    assert (
        CommandTransition.objects.filter(command__retry_of=original, reason_code="manual").count()
        == 1
    )


def test_same_retry_number_read_twice_lands_on_one_row(tenants: tuple[Tenant, Tenant]) -> None:
    """Two clicks racing past the live check build the same key: the second finds the first."""
    original = _expired(tenants[0].kit)
    first = command_retry(command_id=original.pk, actor="sam", reason="once")
    twin = support._retry_insert(
        original, original, first.command.idempotency_key, "by sam: twice", first.command.created_at
    )
    assert not twin.created and twin.command.pk == first.command.pk
    assert len(_retries(original)) == 1


def test_a_later_retry_of_an_ended_retry_gets_the_next_key(tenants: tuple[Tenant, Tenant]) -> None:
    original = _expired(tenants[0].kit)
    first = command_retry(command_id=original.pk, actor="sam", reason="one").command
    assert command_transition(first, CommandStatus.FAILED, ReasonCode.MANUAL)
    second = command_retry(command_id=first.pk, actor="sam", reason="two")
    assert second.created and second.command.retry_of_id == original.pk
    keys = {original.idempotency_key, first.idempotency_key, second.command.idempotency_key}
    assert len(keys) == 3


def test_retry_of_a_live_intent_is_refused(tenants: tuple[Tenant, Tenant]) -> None:
    tenants[0].kit.rule()
    live = dispatch(make_intent(tenants[0].kit))
    assert live.status == CommandStatus.DISPATCHED
    with pytest.raises(CommandRetryRefused):
        command_retry(command_id=live.pk, actor="sam", reason="impatient")
    with pytest.raises(SupportReasonMissing):
        command_retry(command_id=live.pk, actor="sam", reason="  ")
    assert _retries(live) == []
    assert DeviceCommand.objects.get(pk=live.pk).version == live.version


def _api(user: User) -> APIClient:
    return token_client(user)


def test_api_retry_records_actor_and_reason(tenants: tuple[Tenant, Tenant]) -> None:
    alpha, beta = tenants
    original = _expired(alpha.kit)
    theirs = _expired(beta.kit)
    client = _api(alpha.user)
    url = f"/api/v1/commands/{original.pk}/retry/"
    assert client.post(url, {}, format="json").status_code == 400  # a reason is required
    response = client.post(url, {"reason": "fan unplugged"}, format="json")
    assert response.status_code == 201
    body = response.json()
    assert body["retry_of"] == original.pk and body["status"] == "pending_dispatch"
    again = client.post(url, {"reason": "fan unplugged"}, format="json")
    assert again.status_code == 200 and again.json()["id"] == body["id"]
    assert len(_retries(original)) == 1
    audit = CommandTransition.objects.get(command__retry_of=original, reason_code="manual")
    assert audit.detail.endswith("by alpha: fan unplugged")
    # Another organisation's command does not exist; a live command is a 400.
    other = client.post(f"/api/v1/commands/{theirs.pk}/retry/", {"reason": "x"}, format="json")
    assert other.status_code == 404
    live = client.post(f"/api/v1/commands/{body['id']}/retry/", {"reason": "x"}, format="json")
    assert live.status_code == 400
    assert len(_retries(original)) == 1 and _retries(theirs) == []


def test_admin_retry_action_records_actor_and_reason(tenants: tuple[Tenant, Tenant]) -> None:
    alpha, _ = tenants
    original = _expired(alpha.kit)
    codenames = ["view_devicecommand", "change_devicecommand", "operate"]
    alpha.user.user_permissions.add(*Permission.objects.filter(codename__in=codenames))
    client = Client()
    client.login(username="alpha", password="pw")

    def act(ids: list[int], reason: str | None) -> Any:
        data: dict[str, Any] = {"action": "retry", "_selected_action": [str(i) for i in ids]}
        if reason is not None:
            data.update(apply="1", reason=reason)
        return client.post(INTENT_URL, data, follow=True)

    assert b'name="reason"' in act([original.pk], None).content  # asks for a reason first
    assert _retries(original) == []
    page = act([original.pk], "valve serviced")
    assert b"1 done, 0 skipped" in page.content
    (new,) = _retries(original)
    audit = CommandTransition.objects.get(command__retry_of=original, reason_code="manual")
    assert audit.detail.endswith("by alpha: valve serviced")
    # The original's page leads to its retry, whose timeline says who asked and why.
    shown = client.get(f"{INTENT_URL}{original.pk}/change/").content.decode()
    assert f'{new.pk}/change/">#{new.pk}</a>' in shown
    page = act([new.pk], "again")  # the retry is live: refused, nothing created
    assert b"0 done, 1 skipped" in page.content
    assert len(_retries(original)) == 1
