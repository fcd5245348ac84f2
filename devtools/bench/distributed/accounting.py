"""What became of a step's crossings, read back from the database once the step settled:
each crossing's event (found by its sensor and timestamp), the rule's execution, the
command and its audit rows, and the moments of ``stages.TIMELINE`` that have a source.

A moment gets a source in ``_moments``: add the column there and the stage breakdown
splits the hop around it."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from django.db.models import Min, QuerySet

from automation.models import (
    AutomationEndpointEvent,
    AutomationRuleExecution,
    CommandTransition,
    DeviceCommand,
    DeviceCommandReceipt,
    ReceiptType,
)
from automation.states import COMMAND_LIVE, CommandStatus, EventStatus
from devices.models import Device
from devtools.bench.distributed.devices import Offered
from devtools.bench.distributed.results import APPLIED, StepResult, crossing_outcome
from devtools.bench.distributed.stages import stage_breakdown
from devtools.bench.fleet import BenchFleet
from devtools.bench.report import Progress

POLL_S = 0.5
SLACK = timedelta(milliseconds=1)


def sensor_ids(fleet: BenchFleet) -> dict[str, int]:
    return dict(
        Device.objects.filter(serial_number__in=fleet.sensors).values_list("serial_number", "pk")
    )


def _events(
    devices: Mapping[str, int], offered: Sequence[Offered]
) -> QuerySet[AutomationEndpointEvent]:
    """The sensors' events in the step's time span (the relays' own telemetry, sent as they
    apply, makes events too: those are not crossings)."""
    lo, hi = min(o.ts for o in offered), max(o.ts for o in offered)
    return AutomationEndpointEvent.objects.filter(
        device_instance_endpoint__device_id__in=list(devices.values()),
        event_timestamp__gte=lo - SLACK,
        event_timestamp__lte=hi + SLACK,
    )


def step_settle(
    fleet: BenchFleet, devices: Mapping[str, int], offered: Sequence[Offered], timeout_s: float
) -> bool:
    """Wait until every crossing of the step is stored, no event of it is pending and no
    command of the fleet is live; False when ``timeout_s`` passed first (what is still
    open then is counted as lost, not waited for)."""
    events = _events(devices, offered)
    live = DeviceCommand.objects.filter(
        rule__farm__organization_id=fleet.organization_id, status__in=COMMAND_LIVE
    )
    progress = Progress("settling")
    started = time.monotonic()
    while True:
        stored = events.count()
        pending = events.filter(processing_status=EventStatus.PENDING).count()
        waiting = live.count()
        elapsed = time.monotonic() - started
        done = stored >= len(offered) and not pending and not waiting
        progress.update(
            f"{elapsed:5.1f}s {stored:,}/{len(offered):,} stored, {pending:,} pending, "
            f"{waiting:,} command(s) live",
            final=done or elapsed > timeout_s,
        )
        if done:
            return True
        if elapsed > timeout_s:
            return False
        time.sleep(POLL_S)


def step_account(
    result: StepResult,
    offered: Sequence[Offered],
    devices: Mapping[str, int],
    first_seen: Mapping[str, datetime],
) -> None:
    """Fill ``result``'s outcomes, counts, latencies and hops from the database."""
    events_qs = _events(devices, offered)
    rows: list[Any] = list(
        events_qs.values_list(
            "device_instance_endpoint__device_id", "event_timestamp", "pk",
            "processing_status", "status_reason", "created_at", "processed_at",
            "source_telemetry__received_at",
        )
    )  # fmt: skip
    events = {(row[0], row[1]): row[2:] for row in rows}
    executions: dict[int, str] = dict(
        AutomationRuleExecution.objects.filter(event__in=events_qs).values_list(
            "event_id", "outcome"
        )
    )
    commands_qs = DeviceCommand.objects.filter(
        rule_execution__event__in=events_qs, retry_of__isnull=True
    )
    commands = {
        row[0]: row[1:]
        for row in commands_qs.values_list(
            "rule_execution__event_id", "pk", "status", "status_reason", "device_command_id",
            "created_at", "first_dispatched_at", "acknowledged_at", "applied_at",
        )
    }  # fmt: skip
    acked = _firsts(
        CommandTransition.objects.filter(
            command__in=commands_qs, to_status=CommandStatus.ACKNOWLEDGED
        ),
        "at",
    )
    states = _firsts(
        DeviceCommandReceipt.objects.filter(
            command__in=commands_qs, receipt_type=ReceiptType.STATE_REPORT
        ),
        "received_at",
    )
    samples = []
    for o in offered:
        event = events.get((devices[o.serial], o.ts))
        if event is None:
            result.outcomes[crossing_outcome(event_status=None)] += 1
            continue
        event_id, status, reason, created_at, processed_at, received_at = event
        command = commands.get(event_id)
        result.outcomes[
            crossing_outcome(
                event_status=status,
                event_reason=reason,
                execution=executions.get(event_id),
                command_status=command[1] if command else None,
                command_reason=command[2] if command else "",
            )
        ] += 1
        if command is None:
            continue
        result.created += 1
        pk, status, _, command_id, command_created_at, dispatched, ack_at, applied_at = command
        seen = first_seen.get(command_id or "")
        if seen is not None:
            result.reached += 1
            result.to_rpc_ms.append(_ms(o.ts, seen))
        if status == APPLIED and applied_at is not None:
            result.to_applied_ms.append(_ms(o.ts, applied_at))
        samples.append(
            _moments(
                reading=o.ts, bridge_received=received_at, ingest_started=created_at,
                command_created=command_created_at, event_processed=processed_at,
                dispatch_started=dispatched, device_received=seen, ack_received=ack_at,
                state_received=states.get(pk), ack_reconciled=acked.get(pk),
                applied=applied_at,
            )
        )  # fmt: skip
    result.hops = stage_breakdown(samples)


def _moments(**moments: datetime | None) -> dict[str, datetime | None]:
    """A crossing's recorded moments, by ``stages.TIMELINE`` name; a moment the pipeline
    does not record (``bridge_handed_off``, ``ingest_committed``, ``evaluate_started``,
    ``puback``) has no source yet and is simply absent."""
    return moments


def _firsts(rows: QuerySet[Any], column: str) -> dict[int, datetime]:
    firsts = rows.values("command_id").annotate(first=Min(column))
    return dict(firsts.values_list("command_id", "first"))


def _ms(start: datetime, end: datetime) -> float:
    return (end - start).total_seconds() * 1000
