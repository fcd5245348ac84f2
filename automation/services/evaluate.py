"""Rule evaluation: pending endpoint events become rule executions and command intents.

Idempotent under redelivery and concurrency: an execution is unique per (event, rule) and an
intent per idempotency key, both inserted with ON CONFLICT DO NOTHING, so four workers
evaluating one event yield exactly one execution with one intent.
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
from automation.keys import desired_state_fingerprint, intent_idempotency_key
from automation.models import (
    AutomationCommandIntent,
    AutomationEndpointEvent,
    AutomationRule,
    AutomationRuleExecution,
)
from automation.operators import operator_matches, values_equal
from automation.states import (
    COMMAND_LIVE,
    CommandStatus,
    EventStatus,
    ExecutionOutcome,
    ReasonCode,
)

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class _Decision:
    event: AutomationEndpointEvent
    rule: AutomationRule
    outcome: ExecutionOutcome
    reason: str = ""


@dataclass
class EvaluateResult:
    processed: int = 0
    discarded: int = 0
    failed: int = 0
    executions: int = 0
    pending_intent_ids: list[int] = field(default_factory=list)
    endpoint_ids: list[int] = field(default_factory=list)  # may hold evidence for live commands


def _live_targets(rules: Sequence[AutomationRule]) -> dict[int, list[Any]]:
    """Target values of commands still live on each target endpoint (one query)."""
    live: dict[int, list[Any]] = defaultdict(list)
    rows = AutomationCommandIntent.objects.filter(
        target_device_endpoint_id__in={r.target_endpoint_id for r in rules},
        status__in=COMMAND_LIVE,
    ).values_list("target_device_endpoint_id", "target_value")
    for endpoint_id, value in rows:
        live[endpoint_id].append(value)
    return live


def _decide(
    event: AutomationEndpointEvent, rule: AutomationRule, live: dict[int, list[Any]]
) -> _Decision | None:
    """None when the rule's condition does not hold; otherwise what to do about it."""
    if not operator_matches(
        rule.operator, event.normalized_value, rule.threshold_value, rule.threshold_value_high
    ):
        return None
    target = rule.target_endpoint
    blocked = command_gate_failure(rule, target)
    if blocked is not None:
        return _Decision(event, rule, ExecutionOutcome.BLOCKED, blocked)
    live_values = live.get(target.pk, [])
    if any(values_equal(v, rule.target_value) for v in live_values):
        return _Decision(event, rule, ExecutionOutcome.ALREADY_PENDING)
    if not live_values and values_equal(target.last_value, rule.target_value):
        return _Decision(event, rule, ExecutionOutcome.ALREADY_IN_STATE)
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
    live = _live_targets(rules)
    decisions: list[_Decision] = []
    statuses: dict[EventStatus, list[int]] = defaultdict(list)
    for event in events:
        try:
            matched = [
                d
                for rule in rules_by_trigger.get(event.device_instance_endpoint_id, [])
                if rule.farm_id == event.farm_id and (d := _decide(event, rule, live)) is not None
            ]
        except Exception:  # one bad rule or value must not stall the batch
            logger.exception("evaluation failed", extra={"eventId": event.pk})
            statuses[EventStatus.FAILED].append(event.pk)
            continue
        decisions.extend(matched)
        status = EventStatus.PROCESSED if matched else EventStatus.DISCARDED
        statuses[status].append(event.pk)
    with transaction.atomic():
        result.executions = len(decisions)
        result.pending_intent_ids = _persist(decisions)
        for status, ids in statuses.items():
            _events_finish(ids, status)
        if on_intents is not None and result.pending_intent_ids:
            ids = result.pending_intent_ids
            transaction.on_commit(lambda: on_intents(ids))
    result.processed = len(statuses[EventStatus.PROCESSED])
    result.discarded = len(statuses[EventStatus.DISCARDED])
    result.failed = len(statuses[EventStatus.FAILED])
    return result


_EVENT_REASON = {
    EventStatus.PROCESSED: ReasonCode.RULE_MATCHED,
    EventStatus.DISCARDED: ReasonCode.NO_MATCHING_RULE,
    EventStatus.FAILED: ReasonCode.EVALUATION_ERROR,
}


def _events_finish(ids: list[int], status: EventStatus) -> None:
    """Compare-and-set: only a still-pending event moves, so a late duplicate changes nothing."""
    AutomationEndpointEvent.objects.filter(
        pk__in=ids, processing_status=EventStatus.PENDING
    ).update(
        processing_status=status, status_reason=_EVENT_REASON[status], processed_at=timezone.now()
    )


def _persist(decisions: Sequence[_Decision]) -> list[int]:
    """Insert executions and intents set-based; returns ids of intents awaiting dispatch."""
    if not decisions:
        return []
    now = timezone.now()
    AutomationRuleExecution.objects.bulk_create(
        [
            AutomationRuleExecution(
                event=d.event,
                rule=d.rule,
                outcome=d.outcome,
                failure_reason=d.reason,
                created_at=now,
            )
            for d in decisions
        ],
        ignore_conflicts=True,
    )
    wanted = [d for d in decisions if d.outcome == ExecutionOutcome.INTENT_CREATED]
    if not wanted:
        return []
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
    AutomationCommandIntent.objects.bulk_create(intents, ignore_conflicts=True)
    return list(
        AutomationCommandIntent.objects.filter(
            idempotency_key__in=[i.idempotency_key for i in intents],
            status=CommandStatus.PENDING_DISPATCH,
        ).values_list("pk", flat=True)
    )


def _intent(decision: _Decision, execution_id: int, now: datetime) -> AutomationCommandIntent:
    rule, target = decision.rule, decision.rule.target_endpoint
    params = {target.rpc_param_key: rule.target_value}
    return AutomationCommandIntent(
        rule_execution_id=execution_id,
        rule=rule,
        target_device_id=target.device_id,
        target_device_endpoint=target,
        target_serial_number=target.device.serial_number,
        command_method=target.rpc_method,
        command_params=params,
        target_value=rule.target_value,
        idempotency_key=intent_idempotency_key(
            rule_id=rule.pk,
            target_endpoint_id=target.pk,
            target_value=rule.target_value,
            event_id=decision.event.pk,
        ),
        desired_state_fingerprint=desired_state_fingerprint(params),
        max_attempts=settings.COMMAND_MAX_ATTEMPTS,
        created_at=now,
        updated_at=now,
    )


def endpoint_events_pending(*, older_than: datetime, limit: int) -> list[int]:
    """Ids of events still pending since before ``older_than``, oldest first, bounded."""
    return list(
        AutomationEndpointEvent.objects.filter(
            processing_status=EventStatus.PENDING, created_at__lt=older_than
        )
        .order_by("created_at")
        .values_list("pk", flat=True)[:limit]
    )
