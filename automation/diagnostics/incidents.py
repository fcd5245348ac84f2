"""What support looks at first in an incident: commands retrying or uncertain, the devices
with the most ack timeouts, the targets cooling down and the decisions they held."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from django.db.models import Count, Max

from automation.diagnostics.timelines import commands_visible, executions_visible
from automation.models import (
    AutomationRuleExecution,
    CommandCooldown,
    DeviceCommand,
    DeviceCommandReceipt,
    ReceiptType,
)
from automation.services.cooldown import command_cooldowns_cooling
from automation.states import CommandStatus, ExecutionOutcome, ReasonCode
from common.tenancy import OrgScope, scope_filter


def commands_retrying(*, scope: OrgScope = None, limit: int = 100) -> list[DeviceCommand]:
    """Commands waiting for their next attempt, the soonest first."""
    rows = commands_visible(scope=scope).filter(status=CommandStatus.RETRYING)
    return list(rows.order_by("next_attempt_at", "pk")[:limit])


def commands_uncertain(
    *, scope: OrgScope = None, since: datetime | None = None, limit: int = 100
) -> list[DeviceCommand]:
    """Commands the device acknowledged (or contradicted) without proof: newest first."""
    rows = commands_visible(scope=scope).filter(status=CommandStatus.UNCERTAIN)
    if since is not None:
        rows = rows.filter(finished_at__gte=since)
    return list(rows.order_by("-finished_at", "-pk")[:limit])


@dataclass(frozen=True)
class DeviceTimeouts:
    device_id: int | None
    serial_number: str
    timeouts: int
    commands: int
    last_at: datetime


def devices_top_timeouts(
    *, since: datetime, scope: OrgScope = None, limit: int = 10
) -> list[DeviceTimeouts]:
    """Devices by ack timeouts (``timeout_mark`` receipts) since ``since``, most first."""
    rows = DeviceCommandReceipt.objects.filter(
        receipt_type=ReceiptType.TIMEOUT_MARK, received_at__gte=since
    )
    rows = scope_filter(rows, scope, "device__farm__organization_id")
    grouped = (
        rows.values("device_id", "serial_number")
        .annotate(
            timeouts=Count("id"),
            commands=Count("command_id", distinct=True),
            last_at=Max("received_at"),
        )
        .order_by("-timeouts", "serial_number")[:limit]
    )
    return [
        DeviceTimeouts(
            device_id=g["device_id"],
            serial_number=g["serial_number"],
            timeouts=g["timeouts"],
            commands=g["commands"],
            last_at=g["last_at"],
        )
        for g in grouped
    ]


@dataclass(frozen=True)
class TargetCooling:
    """A target (endpoint, value) held by a cool-down, and how many decisions it held."""

    cooldown: CommandCooldown
    serial_number: str
    endpoint_key: str
    suppressed: int


def targets_cooling_down(
    *, now: datetime, since: datetime, scope: OrgScope = None, limit: int = 100
) -> list[TargetCooling]:
    """Pairs still cooling down (by time), the latest failure first, with the decisions each
    suppressed since ``since``: a device that cannot obey shows here, not as a storm."""
    rows = scope_filter(
        command_cooldowns_cooling(now=now),
        scope,
        "target_device_endpoint__device__farm__organization_id",
    ).select_related("target_device_endpoint__device", "target_device_endpoint__profile_endpoint")
    cooling = list(rows.order_by("-updated_at", "-pk")[:limit])
    counts = dict(
        AutomationRuleExecution.objects.filter(
            suppressed_by_id__in=[c.command_id for c in cooling], created_at__gte=since
        )
        .values_list("suppressed_by_id")
        .annotate(n=Count("id"))
    )
    return [
        TargetCooling(
            cooldown=c,
            serial_number=c.target_device_endpoint.device.serial_number,
            endpoint_key=c.target_device_endpoint.profile_endpoint.key,
            suppressed=counts.get(c.command_id, 0),
        )
        for c in cooling
    ]


def decisions_suppressed(*, since: datetime, scope: OrgScope = None) -> int:
    """Rule decisions a cool-down held since ``since`` (not those a manual hold held)."""
    rows = executions_visible(scope=scope).filter(
        outcome=ExecutionOutcome.SUPPRESSED,
        failure_reason=ReasonCode.COOLDOWN,
        created_at__gte=since,
    )
    return rows.count()
