"""An endpoint whose RPC parameter is named apart from its own key (``rpc_param_key``) works
end to end: the command carries the parameter name, the state report is read through the
same mapping, telemetry under the endpoint's key proves the command, and the endpoint's
reported value follows both."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from automation.models import AutomationRuleExecution, DeviceCommand
from config.env import MqttConfig
from devices.mqtt.bridge import MqttBridge
from devtools.simulator import DeviceSimulator, FaultMode, SimulatedDevice
from tests.devices.factories import make_farm
from tests.e2e.conftest import Pipeline, wait_final
from tests.waiting import wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def renamed(bridge: MqttBridge, mqtt_config: MqttConfig) -> Iterator[Pipeline]:
    """A relay whose firmware takes ``relay1`` for the endpoint it reports as ``io1``."""
    kit = make_farm(prefix=f"PK{time.monotonic_ns() % 10**8}")
    kit.io1.rpc_param_key_override = "relay1"
    kit.io1.save()
    sim = DeviceSimulator(
        [
            SimulatedDevice(kit.sensor.serial_number, {"temp": 20.0}),
            SimulatedDevice(
                kit.actuator.serial_number, {"io1": False}, param_keys={"relay1": "io1"}
            ),
        ],
        config=mqtt_config,
        client_id=f"sim-{kit.actuator.serial_number}",
    )
    sim.start()
    yield Pipeline(kit, sim, bridge)
    sim.stop()


def _applied(p: Pipeline) -> DeviceCommand:
    p.kit.rule(operator="gt", threshold_value=30, target_value=True)
    p.telemetry(temp=31)
    (intent,) = wait_final(DeviceCommand.objects.filter(target_device=p.kit.actuator))
    assert intent.status == "applied", intent.status_reason
    assert intent.command_params == {"relay1": True}
    assert p.sim.values_of(p.kit.actuator.serial_number) == {"io1": True}
    return intent


def _reported(p: Pipeline) -> Any:
    p.kit.io1.refresh_from_db()
    return p.kit.io1.last_value


@pytest.mark.parametrize(
    ("fault", "state_by_value_key"),
    [(FaultMode.NONE, False), (FaultMode.NONE, True), (FaultMode.NO_STATE, False)],
    ids=["state-by-param-name", "state-by-endpoint-name", "telemetry-only"],
)
def test_a_renamed_parameter_is_sent_proved_and_reported(
    renamed: Pipeline, fault: str, state_by_value_key: bool
) -> None:
    renamed.fault(FaultMode(fault))
    renamed.sim.set_state_by_value_key(renamed.kit.actuator.serial_number, state_by_value_key)
    intent = _applied(renamed)
    if fault == FaultMode.NO_STATE:  # only telemetry under the endpoint's key can prove it
        assert intent.status_reason == "telemetry_matched"
    else:
        receipt = intent.receipts.filter(receipt_type="state_report").first()
        assert receipt is not None
        assert receipt.payload["reportedState"] == (
            {"io1": True} if state_by_value_key else {"relay1": True}
        )
    wait_for(lambda: _reported(renamed) is True, what="the endpoint's reported value")
    renamed.telemetry(temp=32)  # the same condition again: the relay already holds it
    wait_for(
        lambda: AutomationRuleExecution.objects.filter(outcome="already_in_state").exists(),
        what="already_in_state",
    )
    assert DeviceCommand.objects.filter(target_device=renamed.kit.actuator).count() == 1
