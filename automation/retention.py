"""What the execution core keeps (``common.retention``): an ended command with its
transitions and receipts, a rule execution once no command points at it, a processed
endpoint event by device time (an execution outlives its event: 180 days against 30; on
PostgreSQL a whole partition goes at once); live ones are never pruned."""

from __future__ import annotations

from datetime import datetime

from django.db.models import Exists, OuterRef, Q, QuerySet

from automation.models import AutomationEndpointEvent, DeviceCommand
from automation.states import COMMAND_LIVE, COMMAND_TERMINAL, EventStatus
from common.retention import Retention, retention_register


def _live_commands() -> QuerySet[DeviceCommand]:
    return DeviceCommand.objects.filter(status__in=sorted(COMMAND_LIVE))


def _event_prunable() -> Q:
    """Processed, and no live command was decided on it (its execution outlives it)."""
    live = _live_commands().filter(rule_execution__event_id=OuterRef("pk"))
    return ~Q(processing_status=EventStatus.PENDING) & ~Q(Exists(live))


def _event_partition_keep(lo: datetime, hi: datetime) -> bool:
    """A range holds a pending event or the event of a live command: from the few live rows
    (a partial index, the live commands), never a scan of the range."""
    in_range = {"event_timestamp__gte": lo, "event_timestamp__lt": hi}
    pending = AutomationEndpointEvent.objects.filter(
        processing_status=EventStatus.PENDING, **in_range
    )
    live = _live_commands().filter(
        **{f"rule_execution__event__{name}": value for name, value in in_range.items()}
    )
    return pending.exists() or live.exists()


def automation_retention_register() -> None:
    retention_register(
        Retention(
            "automation.AutomationEndpointEvent",
            "RETENTION_ENDPOINT_EVENTS_DAYS",
            "event_timestamp",
            prunable=_event_prunable,
            outlived_by=("automation.AutomationRuleExecution",),
            partition_keep=_event_partition_keep,
        ),
        before=("devices.Telemetry",),
    )
    retention_register(
        Retention("automation.AutomationRuleExecution", "RETENTION_EXECUTIONS_DAYS", "created_at"),
        before=("automation.AutomationEndpointEvent",),
    )
    retention_register(
        Retention(
            "automation.DeviceCommand",
            "RETENTION_COMMANDS_DAYS",
            "created_at",
            prunable=Q(status__in=sorted(COMMAND_TERMINAL)),
            children=("automation.CommandTransition", "automation.DeviceCommandReceipt"),
        ),
        before=("automation.AutomationRuleExecution",),
    )
