"""factory_boy factories for the automation app's models."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import TYPE_CHECKING, Any

import factory

from automation.models import AutomationRule, DeviceCommand, Operator
from automation.states import CommandOrigin

if TYPE_CHECKING:  # the kit's module imports this one for its rules
    from tests.devices.factories import FarmKit


class RuleFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = AutomationRule

    name = factory.Sequence(lambda n: f"Rule {n}")
    operator = Operator.GT
    threshold_value = 30
    target_value = True


def relay_command(kit: FarmKit, *, at: datetime, **fields: Any) -> DeviceCommand:
    """A manual "relay on" (``io1`` → true) command of the kit's relay, with its commandId,
    created at ``at``; ``fields`` set the rest (its status, when it was sent)."""
    return DeviceCommand.objects.create(
        origin=CommandOrigin.MANUAL,
        target_device=kit.actuator,
        target_device_endpoint=kit.io1,
        target_serial_number=kit.actuator.serial_number,
        command_method="setIO",
        command_params={"io1": True},
        target_value=True,
        idempotency_key=f"relay-{uuid.uuid4().hex[:12]}",
        desired_state_fingerprint="f" * 64,
        device_command_id=f"cmd_{uuid.uuid4().hex[:12]}",
        created_at=at,
        updated_at=at,
        **fields,
    )
