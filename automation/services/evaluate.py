"""Rule evaluation: pending endpoint events become rule executions and command intents.

Idempotent under redelivery and concurrency: an execution is unique per (event, rule) and an
intent per idempotency key, both inserted with ON CONFLICT DO NOTHING, so four workers
evaluating one event yield exactly one execution with one intent.

Latest decision wins: only the newest reading of a trigger endpoint acts (an older one that
arrives late is discarded as ``newer_reading``), evaluation is serialised per target
endpoint, and a new decision supersedes the endpoint's commands that were never sent. So
the device ends in the state the newest reading asks for, whatever the delivery order.

No storms: a target already holding the value (by its last report) or already asked for it
gets no command, and a pair whose last command failed on the device is cooling down
(``automation.services.cooldown``): the decision is recorded ``suppressed``.

Manual control wins over rules while it holds: a decision for an endpoint an operator's
manual command holds (``automation.services.manual``) is recorded
``suppressed``/``manual_override`` and neither creates nor replaces a command.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from automation.gates import command_gate_failure
from automation.keys import desired_state_fingerprint, intent_idempotency_key, target_value_key
from automation.models import (
    AutomationCommandIntent,
    AutomationEndpointEvent,
    AutomationRule,
    AutomationRuleExecution,
    CommandCooldown,
)
from automation.operators import operator_matches, values_equal
from automation.services.cooldown import CooldownKey, command_cooldowns_for, cooldown_holds
from automation.services.manual import manual_holds_active
from automation.services.targets import (
    TargetState,
    commands_supersede_unsent,
    target_state_track,
    target_states_load,
    targets_lock,
)
from automation.states import (
    CommandStatus,
    EventStatus,
    ExecutionOutcome,
    ReasonCode,
)
from common.sql import insert_ignore_returning
from devices.models import DeviceInstanceEndpoint

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class _Decision:
    event: AutomationEndpointEvent
    rule: AutomationRule
    outcome: ExecutionOutcome
    reason: str = ""
    suppressed_by: int | None = None  # the failed command cooling, or the manual one holding


@dataclass
class EvaluateResult:
    processed: int = 0
    discarded: int = 0
    failed: int = 0
    executions: int = 0
    pending_intent_ids: list[int] = field(default_factory=list)
    endpoint_ids: list[int] = field(default_factory=list)  # may hold evidence for live commands
    outcomes: dict[str, int] = field(default_factory=dict)  # decisions by outcome


def _newest_readings(events: Sequence[AutomationEndpointEvent]) -> dict[int, datetime]:
    """Time of the newest ingested reading of each trigger endpoint."""
    rows = DeviceInstanceEndpoint.objects.filter(
        pk__in={e.device_instance_endpoint_id for e in events}, last_value_at__isnull=False
    ).values_list("pk", "last_value_at")
    return {pk: at for pk, at in rows if at is not None}


def _decide(
    event: AutomationEndpointEvent,
    rule: AutomationRule,
    targets: dict[int, TargetState],
    cooldowns: dict[CooldownKey, CommandCooldown],
    holds: dict[int, int],
    now: datetime,
) -> _Decision | None:
    """None when the rule's condition does not hold; otherwise what to do about it.

    Compared with the newest live command, then, when no command is on its way to the
    device, with the value the device last reported (telemetry or a state report): commands
    never sent are replaced by this decision (latest wins), so they do not count. A command
    already sent may still fail, so its value is asked for again rather than assumed."""
    if not operator_matches(
        rule.operator, event.normalized_value, rule.threshold_value, rule.threshold_value_high
    ):
        return None
    endpoint, value = rule.target_endpoint, rule.target_value
    blocked = command_gate_failure(rule, endpoint)
    if blocked is not None:
        return _Decision(event, rule, ExecutionOutcome.BLOCKED, blocked)
    held_by = holds.get(endpoint.pk)
    if held_by is not None:
        return _Decision(
            event, rule, ExecutionOutcome.SUPPRESSED, ReasonCode.MANUAL_OVERRIDE, held_by
        )
    target = targets[endpoint.pk]
    has_live, live_value = target.newest_live_value()
    if has_live and values_equal(live_value, value):
        return _Decision(event, rule, ExecutionOutcome.ALREADY_PENDING)
    if not target.has_sent and values_equal(target.reported, value):
        # Only commands never sent are live (or none): the device holds what it reported.
        return _Decision(event, rule, ExecutionOutcome.ALREADY_IN_STATE)
    cooling = cooldowns.get((endpoint.pk, target_value_key(value)))
    if cooling is not None and cooldown_holds(
        cooling,
        rule=rule,
        reported=target.reported,
        endpoint_edited_at=target.edited_at,
        now=now,
    ):
        return _Decision(
            event, rule, ExecutionOutcome.SUPPRESSED, ReasonCode.COOLDOWN, cooling.command_id
        )
    return _Decision(event, rule, ExecutionOutcome.INTENT_CREATED)


def endpoint_events_evaluate(
    *,
    event_ids: Sequence[int],
    on_intents: Callable[[list[int]], None] | None = None,
) -> EvaluateResult:
    """Evaluate a batch of events; ``on_intents`` receives pending intent ids after commit."""
    events = list(
        AutomationEndpointEvent.objects.filter(
            pk__in=list(event_ids), processing_status=EventStatus.PENDING
        )
    )
    result = EvaluateResult()
    if not events:
        return result
    result.endpoint_ids = sorted({e.device_instance_endpoint_id for e in events})
    rules_by_trigger: dict[int, list[AutomationRule]] = defaultdict(list)
    rules = list(
        AutomationRule.objects.filter(
            trigger_endpoint_id__in={e.device_instance_endpoint_id for e in events},
            is_active=True,
        ).select_related("target_endpoint__device", "target_endpoint__profile_endpoint")
    )
    for rule in rules:
        rules_by_trigger[rule.trigger_endpoint_id].append(rule)
    with transaction.atomic():
        targets_lock(r.target_endpoint_id for r in rules)
        targets = target_states_load(r.target_endpoint_id for r in rules)
        decisions, finished = _decide_all(events, rules_by_trigger, targets)
        result.executions = len(decisions)
        for d in decisions:
            result.outcomes[d.outcome] = result.outcomes.get(d.outcome, 0) + 1
        result.pending_intent_ids = _persist(decisions, targets)
        for (status, reason), ended_ids in finished.items():
            _events_finish(ended_ids, status, reason)
        if on_intents is not None and result.pending_intent_ids:
            handed = result.pending_intent_ids
            transaction.on_commit(lambda: on_intents(handed))
    ended = {status: 0 for status in EventStatus}
    for (status, _), event_ids_ended in finished.items():
        ended[status] += len(event_ids_ended)
    result.processed = ended[EventStatus.PROCESSED]
    result.discarded = ended[EventStatus.DISCARDED]
    result.failed = ended[EventStatus.FAILED]
    return result


EventEnd = tuple[EventStatus, ReasonCode]


def _decide_all(
    events: Sequence[AutomationEndpointEvent],
    rules_by_trigger: dict[int, list[AutomationRule]],
    targets: dict[int, TargetState],
) -> tuple[list[_Decision], dict[EventEnd, list[int]]]:
    """Decisions for the batch, and how each event ends. Only the newest reading of a trigger
    endpoint acts: an older one evaluated late (a redelivery, a sweep after an outage) would
    otherwise send a command the newer reading has already overruled."""
    newest = _newest_readings(events)
    cooldowns = command_cooldowns_for(targets)
    now = timezone.now()
    holds = manual_holds_active(targets, now=now)
    decisions: list[_Decision] = []
    finished: dict[EventEnd, list[int]] = defaultdict(list)
    for event in sorted(events, key=lambda e: (e.event_timestamp, e.pk)):
        seen = newest.get(event.device_instance_endpoint_id)
        if seen is not None and event.event_timestamp < seen:
            finished[EventStatus.DISCARDED, ReasonCode.NEWER_READING].append(event.pk)
            continue
        try:
            matched = [
                d
                for rule in rules_by_trigger.get(event.device_instance_endpoint_id, [])
                if rule.farm_id == event.farm_id
                and (d := _decide(event, rule, targets, cooldowns, holds, now)) is not None
            ]
        except Exception:  # one bad rule or value must not stall the batch
            logger.exception("evaluation failed", extra={"eventId": event.pk})
            finished[EventStatus.FAILED, ReasonCode.EVALUATION_ERROR].append(event.pk)
            continue
        for decision in matched:
            if decision.reason == ReasonCode.MANUAL_OVERRIDE:
                continue  # the manual command stays the endpoint's latest decision
            target_state_track(
                targets[decision.rule.target_endpoint_id],
                decision.outcome,
                decision.rule.target_value,
            )
        decisions.extend(matched)
        if matched:
            finished[EventStatus.PROCESSED, ReasonCode.RULE_MATCHED].append(event.pk)
        else:
            finished[EventStatus.DISCARDED, ReasonCode.NO_MATCHING_RULE].append(event.pk)
    return decisions, finished


def _events_finish(ids: list[int], status: EventStatus, reason: ReasonCode) -> None:
    """Compare-and-set: only a still-pending event moves, so a late duplicate changes nothing."""
    AutomationEndpointEvent.objects.filter(
        pk__in=ids, processing_status=EventStatus.PENDING
    ).update(processing_status=status, status_reason=reason, processed_at=timezone.now())


def _persist(decisions: Sequence[_Decision], targets: dict[int, TargetState]) -> list[int]:
    """Insert executions and intents set-based, replace the unsent commands the decisions
    overruled; returns ids of intents awaiting dispatch."""
    if not decisions:
        return []
    now = timezone.now()
    insert_ignore_returning(
        AutomationRuleExecution,
        [
            {
                "event": d.event.pk,
                "rule": d.rule.pk,
                "target_endpoint": d.rule.target_endpoint_id,
                "outcome": d.outcome,
                "failure_reason": d.reason,
                "suppressed_by": d.suppressed_by,
                "created_at": now,
            }
            for d in decisions
        ],
    )
    wanted = [d for d in decisions if d.outcome == ExecutionOutcome.INTENT_CREATED]
    # Insert in reading order, so on each endpoint the newest reading's command has the
    # highest id (the one that supersedes, and the one the device ends with).
    wanted.sort(key=lambda d: (d.event.event_timestamp, d.event.pk))
    created = _intents_insert(wanted, now) if wanted else []
    return commands_supersede_unsent(targets, created, now)


def _intents_insert(wanted: Sequence[_Decision], now: datetime) -> list[tuple[int, int]]:
    """(id, target endpoint) of the pending intents for these decisions, oldest first."""
    execution_ids = dict(
        (
            ((event_id, rule_id), pk)
            for event_id, rule_id, pk in AutomationRuleExecution.objects.filter(
                event_id__in={d.event.pk for d in wanted},
                rule_id__in={d.rule.pk for d in wanted},
                outcome=ExecutionOutcome.INTENT_CREATED,  # a concurrent worker may have decided
            ).values_list("event_id", "rule_id", "pk")
        )
    )
    intents = [
        _intent(d, execution_ids[(d.event.pk, d.rule.pk)], now)
        for d in wanted
        if (d.event.pk, d.rule.pk) in execution_ids
    ]
    insert_ignore_returning(AutomationCommandIntent, intents)
    return list(
        AutomationCommandIntent.objects.filter(
            idempotency_key__in=[i["idempotency_key"] for i in intents],
            status=CommandStatus.PENDING_DISPATCH,
        )
        .order_by("pk")
        .values_list("pk", "target_device_endpoint_id")
    )


def _intent(decision: _Decision, execution_id: int, now: datetime) -> dict[str, Any]:
    rule, target = decision.rule, decision.rule.target_endpoint
    params = {target.rpc_param_key: rule.target_value}
    return {
        "rule_execution": execution_id,
        "rule": rule.pk,
        "target_device": target.device_id,
        "target_device_endpoint": target.pk,
        "target_serial_number": target.device.serial_number,
        "command_method": target.rpc_method,
        "command_params": params,
        "target_value": rule.target_value,
        "idempotency_key": intent_idempotency_key(
            rule_id=rule.pk,
            target_endpoint_id=target.pk,
            target_value=rule.target_value,
            event_id=decision.event.pk,
        ),
        "desired_state_fingerprint": desired_state_fingerprint(params),
        "max_attempts": settings.COMMAND_MAX_ATTEMPTS,
        "created_at": now,
        "updated_at": now,
    }


def endpoint_events_pending(*, older_than: datetime, limit: int) -> list[int]:
    """Ids of events still pending since before ``older_than``, oldest first, bounded."""
    return list(
        AutomationEndpointEvent.objects.filter(
            processing_status=EventStatus.PENDING, created_at__lt=older_than
        )
        .order_by("created_at")
        .values_list("pk", flat=True)[:limit]
    )
