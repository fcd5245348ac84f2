"""An operator's manual command on the real pipeline (API, workers, broker, bridge, simulated
device): it reaches ``applied`` on the device's evidence, a rule crossing during its hold
changes nothing on the device, and once the hold is cancelled the rule acts again."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.db.models import QuerySet

from automation.models import AutomationRuleExecution, DeviceCommand
from common.models import MemberRole
from tests.common.auth import token_client
from tests.common.factories import OrganizationMemberFactory
from tests.e2e.conftest import Pipeline, wait_final
from tests.waiting import wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


def _intents(p: Pipeline) -> QuerySet[DeviceCommand]:
    return DeviceCommand.objects.filter(target_device=p.kit.actuator)


def test_a_manual_command_applies_and_holds_the_relay_against_a_rule(pipeline: Pipeline) -> None:
    kit = pipeline.kit
    operator = User.objects.create_user(username=f"op-{kit.actuator.serial_number}")
    OrganizationMemberFactory(
        user=operator, organization=kit.farm.organization, role=MemberRole.ADMIN
    )
    api = token_client(operator)
    rule = kit.rule(operator="gt", threshold_value=30, target_value=False)
    relay = kit.actuator.serial_number

    sent = api.post(
        f"/api/v1/endpoints/{kit.io1.pk}/command/",
        {"value": True, "reason": "irrigation check"},
        format="json",
    )
    assert sent.status_code == 201, sent.content
    (manual,) = wait_final(_intents(pipeline))
    assert (manual.origin, manual.status) == ("manual", "applied")
    assert manual.status_reason in ("state_reported", "telemetry_matched")
    assert pipeline.applies(manual.device_command_id) == 1
    assert pipeline.sim.values_of(relay)["io1"] is True

    # Hot: the rule would switch the relay off, but the operator's hold wins.
    pipeline.telemetry(temp=35)
    held = wait_for(
        lambda: AutomationRuleExecution.objects.filter(rule=rule).first(), what="the decision"
    )
    assert (held.outcome, held.failure_reason, held.suppressed_by_id) == (
        "suppressed",
        "manual_override",
        manual.pk,
    )
    assert _intents(pipeline).count() == 1
    assert pipeline.sim.values_of(relay)["io1"] is True

    cancel = api.post(
        f"/api/v1/endpoints/{kit.io1.pk}/hold/cancel/", {"reason": "check done"}, format="json"
    )
    assert cancel.status_code == 200, cancel.content
    pipeline.telemetry(temp=36)
    _, ruled = wait_final(_intents(pipeline), count=2)
    assert (ruled.origin, ruled.rule_id, ruled.status) == ("rule", rule.pk, "applied")
    assert pipeline.sim.values_of(relay)["io1"] is False
