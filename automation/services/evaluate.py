"""Rule evaluation: pending endpoint events become rule executions and device commands.

Idempotent under redelivery and concurrency: an execution is unique per (event, rule) and an
command per idempotency key, both inserted with ON CONFLICT DO NOTHING, so four workers
evaluating one event yield exactly one execution with one command.

Latest decision wins: only the newest reading of a trigger endpoint acts (an older one that
arrives late is discarded as ``newer_reading``), evaluation is serialised per target
endpoint, and a new decision supersedes the endpoint's commands that were never sent. So
the device ends in the state the newest reading asks for, whatever the delivery order.

No storms: a target already holding the value (by its last report) or already asked for it
gets no command, and a pair whose last command failed on the device is cooling down
(``automation.services.cooldown``): the decision is recorded ``suppressed``.

Several rules, conditions and actions: a reading of any of a rule's condition endpoints makes
it evaluate, and it fires only when every condition holds (``automation.services.conditions``);
each of its actions is its own decision, and decisions for one endpoint resolve by priority
(``automation.services.priority``) on the shared decision path
(``automation.services.decisions``).

Manual control wins over rules while it holds: a decision for an endpoint an operator's
manual command holds (``automation.services.manual``) is recorded
``suppressed``/``manual_override`` and neither creates nor replaces a command.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime

from django.db import transaction
from django.utils import timezone

from automation.models import AutomationEndpointEvent, AutomationRule, Operator
from automation.services.conditions import (
    Reading,
    condition_endpoints,
    reading_ids,
    rule_holds,
)
from automation.services.decisions import (
    Decision,
    Trigger,
    candidates_decide,
    decision_context,
    decisions_persist,
    rule_actions,
)
from automation.services.evaluate_sql import endpoint_events_finish, endpoint_events_pending_read
from automation.services.rule_alarms import rule_alarms_sync
from automation.services.rule_cache import rule_set, watchdog_trigger_ids
from automation.services.spine import Committed, hand_on_commit
from automation.services.targets import targets_and_readings_load, targets_lock
from automation.states import EventStatus, ReasonCode
from config.metrics import metrics_decisions_counted

logger = logging.getLogger(__name__)


@dataclass
class EvaluateResult:
    processed: int = 0
    discarded: int = 0
    failed: int = 0
    executions: int = 0
    pending_command_ids: list[int] = field(default_factory=list)
    endpoint_ids: list[int] = field(default_factory=list)  # may hold evidence for live commands
    outcomes: dict[str, int] = field(default_factory=dict)  # decisions by outcome

    @property
    def committed(self) -> Committed:
        """What the next stages act on: the new commands and the endpoints read."""
        return Committed(commands=self.pending_command_ids, endpoints=self.endpoint_ids)


def events_evaluate(*, event_ids: Sequence[int]) -> EvaluateResult:
    """The evaluate task's one call: evaluate, then hand on (``automation.services.spine``)
    once committed: dispatch of the new commands and threshold reminders of the endpoints
    read. The commands the readings may prove went to reconciliation from ingest."""
    result = endpoint_events_evaluate(event_ids=event_ids)
    hand_on_commit(result.committed)
    return result


def endpoint_events_evaluate(*, event_ids: Sequence[int]) -> EvaluateResult:
    """Evaluate a batch of events in one transaction; the caller hands ``committed`` on
    (``events_evaluate``)."""
    # The farm the endpoint's device is in now, joined: a rule decides on its own farm's
    # readings only (a device moved to another farm no longer drives the old farm's rules).
    pending = endpoint_events_pending_read(event_ids)
    events = [p.event for p in pending]
    result = EvaluateResult()
    if not events:
        return result
    result.endpoint_ids = sorted({e.device_instance_endpoint_id for e in events})
    # A watchdog fires on silence, never on a reading (``automation.services.watchdog``):
    # it is not evaluated, and its targets are not locked for its endpoint's readings.
    rule_cache = rule_set()
    rules = [
        r
        for r in rule_cache.rules_triggered_by(result.endpoint_ids)
        if r.operator != Operator.SILENT_FOR
    ]
    rules_by_endpoint: dict[int, list[AutomationRule]] = defaultdict(list)
    for rule in rules:
        for endpoint_id in condition_endpoints(rule):
            rules_by_endpoint[endpoint_id].append(rule)
    target_ids = {a.endpoint.pk for rule in rules for a in rule_actions(rule)}
    with transaction.atomic():
        targets_lock(target_ids)
        watchdog_triggers = watchdog_trigger_ids(rule_cache, target_ids)
        targets, readings = targets_and_readings_load(
            target_ids,
            reading_ids(rules, also=[*result.endpoint_ids, *watchdog_triggers]),
            priorities=rule_cache.priorities,
        )
        now = timezone.now()
        context = decision_context(targets, now, rules=rule_cache, readings=readings)
        farm_of = {p.event.pk: p.farm_id for p in pending}
        candidates, finished, verdicts = _candidates(events, farm_of, rules_by_endpoint, readings)
        decisions, decided = candidates_decide(candidates, context)
        result.executions = len(decisions)
        for d in decisions:
            result.outcomes[d.outcome] = result.outcomes.get(d.outcome, 0) + 1
        result.pending_command_ids = decisions_persist(decisions, decided, now)
        endpoint_events_finish(
            {pk: end for end, ended_ids in finished.items() for pk in ended_ids},
            now=timezone.now(),
        )
        rule_alarms_sync(verdicts=verdicts, now=now)
    ended = {status: 0 for status in EventStatus}
    for (status, _), event_ids_ended in finished.items():
        ended[status] += len(event_ids_ended)
    result.processed = ended[EventStatus.PROCESSED]
    result.discarded = ended[EventStatus.DISCARDED]
    result.failed = ended[EventStatus.FAILED]
    metrics_decisions_counted(outcomes=result.outcomes)
    return result


EventEnd = tuple[EventStatus, ReasonCode]
Verdicts = dict[int, tuple[AutomationRule, bool]]  # rule id → (rule, its conditions held)


def _candidates(
    events: Sequence[AutomationEndpointEvent],
    farm_of: dict[int, int],  # event id → its endpoint's farm
    rules_by_endpoint: dict[int, list[AutomationRule]],
    readings: dict[int, Reading],
) -> tuple[list[Decision], dict[EventEnd, list[int]], Verdicts]:
    """One candidate per (event, firing rule, action), how each event ends, and each rule's
    verdict on the newest reading that evaluated it (its alarm follows it). Only the
    newest reading of an endpoint (its ``readings`` entry) acts: an older one evaluated late
    (a redelivery, a sweep after an outage) would otherwise send a command the newer reading
    has already overruled."""
    candidates: list[Decision] = []
    finished: dict[EventEnd, list[int]] = defaultdict(list)
    verdicts: Verdicts = {}
    for event in sorted(events, key=lambda e: (e.event_timestamp, e.pk)):
        newest = readings.get(event.device_instance_endpoint_id)
        if newest is not None and newest.at is not None and event.event_timestamp < newest.at:
            finished[EventStatus.DISCARDED, ReasonCode.NEWER_READING].append(event.pk)
            continue
        trigger = Trigger(at=event.event_timestamp, event=event)
        try:
            judged = {
                rule.pk: (rule, rule_holds(rule, readings, at=event.event_timestamp, event=event))
                for rule in rules_by_endpoint.get(event.device_instance_endpoint_id, [])
                if rule.farm_id == farm_of[event.pk]
            }
        except Exception:  # one bad rule or value must not stall the batch
            logger.exception("evaluation failed", extra={"eventId": event.pk})
            finished[EventStatus.FAILED, ReasonCode.EVALUATION_ERROR].append(event.pk)
            continue
        verdicts |= judged
        fired = [rule for rule, holds in judged.values() if holds]
        candidates.extend(
            Decision(trigger, rule, action) for rule in fired for action in rule_actions(rule)
        )
        if fired:
            finished[EventStatus.PROCESSED, ReasonCode.RULE_MATCHED].append(event.pk)
        else:
            finished[EventStatus.DISCARDED, ReasonCode.NO_MATCHING_RULE].append(event.pk)
    return candidates, finished, verdicts


def endpoint_events_pending(*, older_than: datetime, limit: int) -> list[int]:
    """Ids of events still pending since before ``older_than``, oldest first, bounded."""
    return list(
        AutomationEndpointEvent.objects.filter(
            processing_status=EventStatus.PENDING, created_at__lt=older_than
        )
        .order_by("created_at")
        .values_list("pk", flat=True)[:limit]
    )
