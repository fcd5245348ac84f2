"""Deleting a rule: ``DELETE /api/v1/rules/{id}/`` is a 204 for an admin of its organisation,
after which the rule is not found (a second DELETE is a 404), evaluates and fires no more, and
is never active again; its executions and commands stay, still naming it. The admin deletes
the same way and keeps showing the deleted rule, read-only."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest
from django.db import IntegrityError, transaction
from django.test import Client
from django.utils import timezone

from automation.models import AutomationRule, AutomationRuleExecution, DeviceCommand
from automation.services.evaluate import endpoint_events_evaluate
from automation.services.ingest import telemetry_ingest
from automation.services.rule_schedules import rule_schedules_ensure_due
from automation.services.rules import RuleInvalid, rule_delete, rule_update
from common.models import MemberRole, OrganizationMember
from devices.mqtt.messages import InboundTelemetry
from scheduler.states import SchedulerReason, SchedulerStatus
from tests.automation.conftest import dispatch, make_intent
from tests.automation.test_rule_schedules import NOW, rows_of, run_due, scheduled_rule
from tests.common.auth import token_client
from tests.conftest import Tenant
from tests.devices.factories import FarmKit, make_farm

pytestmark = pytest.mark.django_db
RULES = "/api/v1/rules/"
RULE_ADMIN = "/admin/automation/automationrule/"


def _reading(kit: FarmKit, temp: float, ts: str) -> list[int]:
    """A reading over (or under) the rule's threshold, evaluated: the executions it made."""
    payload = json.dumps({"ts": ts, "values": {"temp": temp}})
    ids = telemetry_ingest(
        messages=[InboundTelemetry(kit.sensor.serial_number, payload, timezone.now())]
    ).pending_event_ids
    endpoint_events_evaluate(event_ids=ids)
    return list(
        AutomationRuleExecution.objects.filter(event_id__in=ids).values_list("pk", flat=True)
    )


@pytest.mark.usefixtures("clock_at_fixture_dates")
def test_a_deleted_rule_is_gone_from_the_api_and_its_history_stays(
    tenants: tuple[Tenant, Tenant],
) -> None:
    alpha, _ = tenants
    client = token_client(alpha.user)
    rule = alpha.kit.rule()
    intent = dispatch(make_intent(alpha.kit))
    assert client.delete(f"{RULES}{rule.pk}/").status_code == 204

    assert client.get(f"{RULES}{rule.pk}/").status_code == 404
    assert rule.pk not in [r["id"] for r in client.get(RULES).json()["results"]]
    assert client.patch(f"{RULES}{rule.pk}/", {"name": "back"}, format="json").status_code == 404
    assert client.delete(f"{RULES}{rule.pk}/").status_code == 404  # not there to delete
    # The history is kept and still names the rule.
    command = client.get(f"/api/v1/commands/{intent.pk}/").json()
    assert (command["rule"], command["rule_execution"]) == (rule.pk, intent.rule_execution_id)
    assert client.get("/api/v1/commands/", {"rule": rule.pk}).json()["results"][0]["id"] == (
        intent.pk
    )
    execution = client.get(f"/api/v1/executions/{intent.rule_execution_id}/").json()
    assert execution["rule"] == rule.pk
    timeline = client.get(f"/api/v1/commands/{intent.pk}/timeline/").json()
    assert [e["stage"] for e in timeline["entries"]][:4] == [
        "telemetry",
        "event",
        "execution",
        "command",
    ]
    assert DeviceCommand.objects.get(pk=intent.pk).transitions.exists()  # its audit rows
    row = AutomationRule.objects.get(pk=rule.pk)
    assert (row.is_active, row.deleted_by) == (False, alpha.user.username)
    assert row.deleted_at is not None


@pytest.mark.usefixtures("clock_at_fixture_dates")
def test_only_an_admin_of_the_rules_organisation_deletes_it(
    tenants: tuple[Tenant, Tenant],
) -> None:
    alpha, beta = tenants
    rule = alpha.kit.rule()
    assert token_client(beta.user).delete(f"{RULES}{rule.pk}/").status_code == 404
    OrganizationMember.objects.filter(user=alpha.user).update(role=MemberRole.OPERATOR)
    assert token_client(alpha.user).delete(f"{RULES}{rule.pk}/").status_code == 403
    assert AutomationRule.objects.get(pk=rule.pk).deleted_at is None


@pytest.mark.usefixtures("clock_at_fixture_dates")
def test_a_deleted_rule_evaluates_no_more_and_its_unsent_command_is_not_sent() -> None:
    kit = make_farm()
    rule = kit.rule()
    pending = make_intent(kit)  # decided, not yet sent
    assert rule_delete(rule_id=rule.pk, actor="support") is True
    assert _reading(kit, 35, "2026-11-29T11:59:30Z") == []  # over the threshold: nothing
    assert AutomationRuleExecution.objects.filter(rule=rule).count() == 1
    sent = dispatch(pending)
    assert (sent.status, sent.status_reason) == ("failed", "rule_inactive")
    assert sent.rule_id == rule.pk


def test_a_deleted_scheduled_rule_fires_no_more() -> None:
    kit = make_farm()
    rule = scheduled_rule(kit)
    rule_schedules_ensure_due(now=NOW)
    assert [r.status for r in rows_of(rule)] == [SchedulerStatus.PENDING] * 2
    assert rule_delete(rule_id=rule.pk, actor="support", now=NOW) is True
    ended = [(r.status, r.failure_reason_code) for r in rows_of(rule)]
    assert ended == [(SchedulerStatus.DEACTIVATED, SchedulerReason.SOURCE_NO_LONGER_VALID)] * 2
    assert rule_schedules_ensure_due(now=NOW) == 0  # beat ensures nothing for it again
    run_due(datetime(2026, 11, 29, 5, 0, 5, tzinfo=UTC))
    assert not DeviceCommand.objects.exists()


def test_an_occurrence_of_a_rule_deleted_meanwhile_ends_at_due_time() -> None:
    """A row the delete did not reach (already due, or written concurrently) finds the rule
    deleted when it runs."""
    kit = make_farm()
    rule = scheduled_rule(kit)
    rule_schedules_ensure_due(now=NOW)
    AutomationRule.objects.filter(pk=rule.pk).update(is_active=False, deleted_at=NOW)
    run_due(datetime(2026, 11, 29, 5, 0, 5, tzinfo=UTC))
    first = rows_of(rule)[0]
    assert (first.status, first.failure_reason_code) == (
        SchedulerStatus.DEACTIVATED,
        SchedulerReason.SOURCE_NO_LONGER_VALID,
    )
    assert not DeviceCommand.objects.exists()


def test_a_deleted_rule_is_never_active_again_nor_changed() -> None:
    kit = make_farm()
    rule = kit.rule()
    assert rule_delete(rule_id=rule.pk, actor="support") is True
    assert rule_delete(rule_id=rule.pk, actor="support") is False  # the first one won
    assert rule_delete(rule_id=rule.pk + 1000, actor="support") is False
    with pytest.raises(RuleInvalid) as refused:
        rule_update(rule, name="back", is_active=True)  # an instance read before the delete
    assert refused.value.errors == {"non_field_errors": "the rule was deleted"}
    with pytest.raises(IntegrityError), transaction.atomic():
        AutomationRule.objects.filter(pk=rule.pk).update(is_active=True)
    row = AutomationRule.objects.get(pk=rule.pk)
    assert (row.name, row.is_active, row.deleted_by) == (rule.name, False, "support")


@pytest.mark.usefixtures("clock_at_fixture_dates")
def test_the_admin_deletes_through_the_service_and_keeps_showing_the_rule(
    support: Client,
) -> None:
    kit = make_farm(prefix="adm")
    rule = kit.rule()
    intent = make_intent(kit)
    confirm = support.get(f"{RULE_ADMIN}{rule.pk}/delete/")
    assert confirm.status_code == 200
    assert "its executions and commands are kept" in confirm.content.decode()
    assert support.post(f"{RULE_ADMIN}{rule.pk}/delete/", {"post": "yes"}).status_code == 302
    row = AutomationRule.objects.get(pk=rule.pk)
    assert (row.is_active, row.deleted_by) == (False, "support")
    assert DeviceCommand.objects.filter(pk=intent.pk, rule=rule).exists()
    link = f"{RULE_ADMIN}{rule.pk}/change/"
    listed = support.get(RULE_ADMIN, {"deleted": "yes"})
    assert listed.status_code == 200 and link in listed.content.decode()
    assert link not in support.get(RULE_ADMIN, {"deleted": "no"}).content.decode()
    page = support.get(link)
    assert page.status_code == 200 and "Deleted by" in page.content.decode()  # read-only
    assert support.post(link, {"name": "x"}).status_code == 403
    assert support.post(f"{RULE_ADMIN}{rule.pk}/delete/", {"post": "yes"}).status_code == 403
