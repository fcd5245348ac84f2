"""What the execution core keeps (``common.retention``): an ended command with its
transitions and receipts, a rule execution once no command points at it, a processed
endpoint event once no execution points at it; live ones are never pruned."""

from __future__ import annotations

from django.db.models import Q

from automation.states import COMMAND_TERMINAL, EventStatus
from common.retention import Retention, retention_register


def automation_retention_register() -> None:
    retention_register(
        Retention(
            "automation.AutomationEndpointEvent",
            "RETENTION_ENDPOINT_EVENTS_DAYS",
            "created_at",
            prunable=~Q(processing_status=EventStatus.PENDING),
        ),
        before=("devices.Telemetry",),
    )
    retention_register(
        Retention("automation.AutomationRuleExecution", "RETENTION_EXECUTIONS_DAYS", "created_at"),
        before=("automation.AutomationEndpointEvent",),
    )
    retention_register(
        Retention(
            "automation.AutomationCommandIntent",
            "RETENTION_COMMANDS_DAYS",
            "created_at",
            prunable=Q(status__in=sorted(COMMAND_TERMINAL)),
            children=("automation.CommandTransition", "automation.DeviceCommandReceipt"),
        ),
        before=("automation.AutomationRuleExecution",),
    )
