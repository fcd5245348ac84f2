"""The automation app's models, one module per concern; imported here so ``automation.models``
stays the one place to import them from."""

from automation.models.audit import CommandTransition, DeviceCommandReceipt, ReceiptType
from automation.models.holds import CommandCooldown, EndpointManualHold
from automation.models.ledger import (
    AutomationEndpointEvent,
    AutomationRuleExecution,
    DeviceCommand,
)
from automation.models.rules import (
    PRIORITY_MAX,
    PRIORITY_MIN,
    AutomationRule,
    AutomationRuleAction,
    AutomationRuleCondition,
    Operator,
)
from automation.models.schedules import AutomationRuleSchedule

__all__ = [
    "PRIORITY_MAX",
    "PRIORITY_MIN",
    "AutomationEndpointEvent",
    "AutomationRule",
    "AutomationRuleAction",
    "AutomationRuleCondition",
    "AutomationRuleExecution",
    "AutomationRuleSchedule",
    "CommandCooldown",
    "CommandTransition",
    "DeviceCommand",
    "DeviceCommandReceipt",
    "EndpointManualHold",
    "Operator",
    "ReceiptType",
]
