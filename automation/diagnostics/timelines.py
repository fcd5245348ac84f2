"""The timeline of a device command and of a rule execution: every step from the reading
to the device's receipts, with when, what and why, each value in its endpoint's type and unit.
``scope`` limits rows to organisations (``None``: all)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.db.models import Q, QuerySet

from alarms.models import AlarmSource, AlarmTransition, AlarmType
from automation.models import (
    AutomationEndpointEvent,
    AutomationRuleExecution,
    DeviceCommand,
    DeviceCommandReceipt,
    ReceiptType,
)
from automation.states import CommandOrigin, ExecutionOutcome
from common.tenancy import OrgScope, scope_filter
from devices.display import endpoint_value_text, params_text
from devices.models import DeviceProfileEndpoint

# Order of stages at the same instant: cause before effect.
_STAGE_ORDER = {"telemetry": 0, "event": 1, "execution": 2, "command": 3, "transition": 4}
_STAGE_ORDER |= {"receipt": 5, "alarm": 6}
# A watchdog raises its rule's alarm in the run that creates its command, at the same instant.
_WATCHDOG_ALARM_SLACK = timedelta(seconds=1)
# An outcome as a person reads it, where its stored value says something else.
OUTCOME_TEXT: dict[str, str] = {ExecutionOutcome.COMMAND_CREATED: "command created"}


def outcome_text(outcome: str) -> str:
    """A rule execution's outcome in the pages' words (``command created``)."""
    return OUTCOME_TEXT.get(outcome, outcome)


@dataclass(frozen=True)
class TimelineEntry:
    """One step of a command's life, with when, what and why."""

    at: datetime
    stage: str  # telemetry | event | execution | command | transition | receipt | alarm
    what: str
    reason: str = ""
    attempt: int | None = None
    detail: str = ""
    ref: str = ""  # "<table>:<id>", so support can open the row

    def as_dict(self) -> dict[str, Any]:
        return {
            "at": self.at.isoformat(),
            "stage": self.stage,
            "what": self.what,
            "reason": self.reason,
            "attempt": self.attempt,
            "detail": self.detail,
            "ref": self.ref,
        }


@dataclass(frozen=True)
class Timeline:
    """The steps of one execution or command, oldest first, and the ids that tie them."""

    subject: str
    ids: dict[str, Any]
    entries: list[TimelineEntry] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {
            "subject": self.subject,
            "ids": self.ids,
            "entries": [e.as_dict() for e in self.entries],
        }


def _sorted(entries: list[TimelineEntry]) -> list[TimelineEntry]:
    return sorted(entries, key=lambda e: (e.at, _STAGE_ORDER.get(e.stage, 9)))


def _execution_entries(execution: AutomationRuleExecution) -> list[TimelineEntry]:
    decided = TimelineEntry(
        at=execution.created_at,
        stage="execution",
        what=f"rule {execution.rule_id} '{execution.rule.name}' -> "
        f"{outcome_text(execution.outcome)}",
        reason=execution.failure_reason,
        detail=f"won by execution {execution.won_by_id}" if execution.won_by_id else "",
        ref=f"execution:{execution.pk}",
    )
    event = execution.event
    if event is None and execution.event_id is not None:  # the reading outlived by its decision
        pruned = TimelineEntry(
            at=execution.created_at,
            stage="event",
            what=f"endpoint event {execution.event_id} pruned (RETENTION_ENDPOINT_EVENTS_DAYS)",
            ref=f"event:{execution.event_id}",
        )
        return [pruned, decided]
    if event is None:  # a schedule's occurrence
        row = execution.occurrence
        assert row is not None  # an execution has an event or an occurrence (a constraint)
        cause = TimelineEntry(
            at=row.scheduled_on,
            stage="event",
            what=f"rule schedule occurrence due (local {row.scheduled_local_date}, "
            f"{row.time_zone_id})",
            detail=row.scheduler_key,
            ref=f"scheduler:{row.pk}",
        )
        return [cause, decided]
    telemetry = event.source_telemetry
    return [
        TimelineEntry(
            at=telemetry.received_at,
            stage="telemetry",
            what=f"telemetry received from device {telemetry.device_id}",
            detail=f"message ts {telemetry.message_ts.isoformat()}",
            ref=f"telemetry:{telemetry.pk}",
        ),
        TimelineEntry(
            at=event.created_at,
            stage="event",
            what=f"endpoint event value={_reading_text(event)} -> {event.processing_status}",
            reason=event.status_reason,
            detail=f"endpoint {event.device_instance_endpoint_id}",
            ref=f"event:{event.pk}",
        ),
        decided,
    ]


def _reading_text(event: AutomationEndpointEvent) -> str:
    """The reading in its endpoint's type and unit."""
    endpoint = event.device_instance_endpoint
    return endpoint_value_text(event.normalized_value, endpoint.profile_endpoint)


def _command_endpoints(command: DeviceCommand) -> dict[str, DeviceProfileEndpoint]:
    """A command sets one endpoint: each key of its parameters (and of the state the device
    reports back) is that endpoint, read in its type and unit."""
    endpoint = command.target_device_endpoint.profile_endpoint
    params = command.command_params if isinstance(command.command_params, dict) else {}
    return {key: endpoint for key in (*params, endpoint.key)}


def _receipt_what(
    receipt: DeviceCommandReceipt, endpoints: dict[str, DeviceProfileEndpoint]
) -> tuple[str, str]:
    payload = receipt.payload if isinstance(receipt.payload, dict) else {}
    if receipt.receipt_type in (ReceiptType.RPC_ACK, ReceiptType.RPC_RESULT):
        return f"{receipt.receipt_type} {payload.get('status', '')}", str(
            payload.get("resultCode", "")
        )
    if receipt.receipt_type == ReceiptType.STATE_REPORT:
        return f"state_report {params_text(payload.get('reportedState'), endpoints)}", ""
    return str(receipt.receipt_type), str(payload.get("reason", ""))


def requester_name(command: DeviceCommand) -> str:
    """Who asked for a manual command ("" for a rule's or a schedule's)."""
    if command.origin != CommandOrigin.MANUAL:
        return ""
    user = command.requested_by
    return user.get_username() if user is not None else "(deleted user)"


def _command_entries(command: DeviceCommand) -> list[TimelineEntry]:
    asked = ""
    if command.origin == CommandOrigin.MANUAL:
        asked = f" asked by {requester_name(command)}: {command.request_reason}"
    elif command.origin == CommandOrigin.SCHEDULE:
        asked = f" by rule {command.rule_id}'s schedule"
    elif command.origin == CommandOrigin.WATCHDOG:
        asked = f" by rule {command.rule_id}'s watchdog: its trigger endpoint fell silent"
    endpoints = _command_endpoints(command)
    entries = [
        TimelineEntry(
            at=command.created_at,
            stage="command",
            what=f"{command.origin} command created: {command.command_method} "
            f"{params_text(command.command_params, endpoints)} to {command.target_serial_number}",
            detail=f"idempotency key {command.idempotency_key[:12]}…{asked}",
            ref=f"command:{command.pk}",
        )
    ]
    for t in command.transitions.order_by("at", "pk"):
        entries.append(
            TimelineEntry(
                at=t.at,
                stage="transition",
                what=f"{t.from_status or 'new'} -> {t.to_status}",
                reason=t.reason_code,
                attempt=t.attempt,
                detail=t.detail,
                ref=f"transition:{t.pk}",
            )
        )
    for r in command.receipts.order_by("received_at", "pk"):
        what, reason = _receipt_what(r, endpoints)
        entries.append(
            TimelineEntry(
                at=r.received_at,
                stage="receipt",
                what=what + (" (topic serial mismatch)" if r.mismatch else ""),
                reason=reason,
                attempt=r.attempt,
                detail=f"from {r.serial_number}",
                ref=f"receipt:{r.pk}",
            )
        )
    return entries


def _alarm_entries(command: DeviceCommand) -> list[TimelineEntry]:
    """The alarm the command raised (it ended failed, expired or uncertain), or, for a
    watchdog's command, the rule's alarm raised with it: each move of it, who and why."""
    raised_here = Q(alarm__source=AlarmSource.COMMAND, alarm__source_id=command.pk)
    if command.origin == CommandOrigin.WATCHDOG and command.rule_id is not None:
        raised_here |= Q(
            alarm__source=AlarmSource.RULE,
            alarm__source_id=command.rule_id,
            alarm__type=AlarmType.WATCHDOG,
            alarm__first_raised_at__gte=command.created_at - _WATCHDOG_ALARM_SLACK,
            alarm__first_raised_at__lte=command.created_at + _WATCHDOG_ALARM_SLACK,
        )
    moves = AlarmTransition.objects.filter(raised_here).select_related("alarm").order_by("at", "pk")
    return [
        TimelineEntry(
            at=t.at,
            stage="alarm",
            what=f"{t.alarm.severity} {t.alarm.type} alarm {t.from_status or 'raised'} -> "
            f"{t.to_status}",
            reason=t.reason,
            detail=f"by {t.actor}" + (f": {t.comment}" if t.comment else ""),
            ref=f"alarm:{t.alarm_id}",
        )
        for t in moves
    ]


def _command_ids(command: DeviceCommand) -> dict[str, Any]:
    execution = command.rule_execution
    return {
        "origin": command.origin,
        "requestedBy": requester_name(command) or None,
        "eventId": execution.event_id if execution is not None else None,
        "occurrenceId": execution.occurrence_id if execution is not None else None,
        "ruleId": command.rule_id,
        "ruleExecutionId": command.rule_execution_id,
        "commandIntentId": command.pk,
        "deviceCommandId": command.device_command_id,
        "deviceId": command.target_device_id,
        "serialNumber": command.target_serial_number,
        "status": command.status,
        "statusReason": command.status_reason,
        "attempts": command.attempt_count,
    }


def commands_visible(*, scope: OrgScope) -> QuerySet[DeviceCommand]:
    rows = DeviceCommand.objects.select_related(
        "rule_execution",
        "target_device",
        "requested_by",
        "target_device_endpoint__profile_endpoint",
    )
    return scope_filter(rows, scope, "target_device__farm__organization_id")


def executions_visible(*, scope: OrgScope) -> QuerySet[AutomationRuleExecution]:
    rows = AutomationRuleExecution.objects.select_related("rule", "event")
    return scope_filter(rows, scope, "rule__farm__organization_id")


def command_timeline(*, command: DeviceCommand) -> Timeline:
    """event → execution → command → each transition (attempt) → each receipt; a manual
    command starts at its creation, which names who asked and why."""
    entries = _command_entries(command) + _alarm_entries(command)
    if command.rule_execution_id is not None:
        execution = AutomationRuleExecution.objects.select_related(
            "rule",
            "event__source_telemetry",
            "event__device_instance_endpoint__profile_endpoint",
            "occurrence",
        ).get(pk=command.rule_execution_id)
        entries = _execution_entries(execution) + entries
    subject = f"command {command.device_command_id or '(not yet sent)'} (#{command.pk})"
    return Timeline(subject=subject, ids=_command_ids(command), entries=_sorted(entries))


def execution_timeline(*, execution: AutomationRuleExecution) -> Timeline:
    """The execution's cause and decision, then its command's whole life if it made one."""
    execution = AutomationRuleExecution.objects.select_related(
        "rule",
        "event__source_telemetry",
        "event__device_instance_endpoint__profile_endpoint",
        "occurrence",
    ).get(pk=execution.pk)
    entries = _execution_entries(execution)
    command = DeviceCommand.objects.filter(rule_execution=execution).first()
    ids: dict[str, Any] = {
        "eventId": execution.event_id,
        "occurrenceId": execution.occurrence_id,
        "ruleId": execution.rule_id,
        "ruleExecutionId": execution.pk,
        "outcome": execution.outcome,
    }
    if command is not None:
        entries += _command_entries(command)
        ids.update(_command_ids(command))
    return Timeline(subject=f"rule execution {execution.pk}", ids=ids, entries=_sorted(entries))


class TimelineNotFound(LookupError):
    pass


def timeline_lookup(*, ref: str, scope: OrgScope = None) -> Timeline:
    """``cmd_…`` (deviceCommandId), ``command:<id>`` (``intent:<id>``, its earlier name,
    still read), ``execution:<id>`` or a bare execution id; outside ``scope`` counts as not
    found."""
    ref = ref.strip()
    commands = commands_visible(scope=scope)
    kind, _, number = ref.partition(":")
    if ref.startswith("cmd_"):
        command = commands.filter(device_command_id=ref).first()
        if command is not None:
            return command_timeline(command=command)
    elif kind in ("command", "intent") and number.isdigit():
        command = commands.filter(pk=int(number)).first()
        if command is not None:
            return command_timeline(command=command)
    else:
        number = ref.removeprefix("execution:")
        if number.isdigit():
            execution = executions_visible(scope=scope).filter(pk=int(number)).first()
            if execution is not None:
                return execution_timeline(execution=execution)
    raise TimelineNotFound(f"no command or execution {ref!r}")
