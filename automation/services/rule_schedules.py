"""Time-based rules: each occurrence of a rule's schedules is one scheduler row, key
``rule-schedule:{ruleId}:{occurrenceUtc}``, so it runs once whatever crashes or redelivers.

* Occurrences are local times in the farm's zone under the reminders' DST rule
  (``common.localtime``): a time a DST gap skips moves forward by the gap, one a fold repeats
  runs at its first instant. Two schedules of a rule at one instant are one occurrence.
* Beat ensures the rows up to ``HORIZON`` ahead (only the missing ones are written), and back
  to ``BACKFILL`` for an outage that also stopped beat, so a missed occurrence still ends
  visibly instead of vanishing.
* At due time the handler reloads the rule: gone or deleted, inactive, or no longer wanting
  this instant (an edited or removed schedule) deactivates the row. An occurrence run later
  than its schedule's ``max_lateness_s`` records ``skipped``/``too_late`` for each action and
  sends nothing; otherwise, when every condition holds on fresh readings, each action takes the
  decision path of readings (``automation.services.decisions``), its commands of origin
  ``schedule``.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from typing import TypedDict

from django.db import transaction
from django.db.models import Prefetch, QuerySet

from automation.models import AutomationRule, AutomationRuleSchedule
from automation.services.conditions import RULES_DECIDING, reading_ids, rule_holds, rules_loaded
from automation.services.decisions import (
    Decision,
    Trigger,
    candidates_decide,
    decision_context,
    decisions_persist,
    rule_actions,
)
from automation.services.spine import Committed, hand_on_commit
from automation.services.targets import targets_and_readings_load, targets_lock
from automation.states import ExecutionOutcome, ReasonCode
from common.json_types import JsonValue
from common.localtime import LocalTimeRule, local_to_utc
from scheduler.keys import (
    RuleScheduleKey,
    SchedulerKeyError,
    parse_scheduler_key,
    rule_schedule_key,
    scheduler_input_hash,
    scheduler_key,
)
from scheduler.models import AutomationType, DueWork, TriggerType
from scheduler.registry import (
    Deactivate,
    HandlerResult,
    HoldForSupport,
    PermanentFailure,
    SchedulerJob,
    SourceNoLongerValid,
)
from scheduler.services import scheduler_deactivate_by_key, scheduler_ensure
from scheduler.states import SchedulerReason, SchedulerStatus

_SETTLED = (SchedulerStatus.PENDING, SchedulerStatus.PROCESSING, SchedulerStatus.COMPLETED)
HORIZON = timedelta(days=2)
BACKFILL = timedelta(days=1)
ENSURE_BATCH = 200


@dataclass(frozen=True)
class RuleOccurrence:
    utc: datetime
    local_date: date
    local_time_rule: LocalTimeRule
    schedule: AutomationRuleSchedule


class RuleOccurrenceInput(TypedDict):
    """What an occurrence's scheduler row is hashed from: its identity only."""

    rule: int
    at: datetime


def _active_schedules() -> Prefetch[str, QuerySet[AutomationRuleSchedule]]:
    return Prefetch(
        "schedules",
        queryset=AutomationRuleSchedule.objects.filter(is_active=True).order_by("local_time"),
        to_attr="active_schedules",
    )


def rule_occurrences(rule: AutomationRule, start: datetime, end: datetime) -> list[RuleOccurrence]:
    """The rule's occurrences in [start, end), oldest first (``active_schedules`` prefetched,
    the farm loaded); an instant two schedules share is one occurrence, the earlier local
    time's."""
    zone = rule.farm.time_zone
    found: dict[datetime, RuleOccurrence] = {}
    day = (start - timedelta(days=1)).date()
    while day <= (end + timedelta(days=1)).date():
        for schedule in rule.active_schedules:  # type: ignore[attr-defined]
            if not schedule.weekdays & (1 << day.weekday()):
                continue
            instant = local_to_utc(day, schedule.local_time, zone)
            if start <= instant.utc < end and instant.utc not in found:
                found[instant.utc] = RuleOccurrence(instant.utc, day, instant.rule, schedule)
        day += timedelta(days=1)
    return [found[at] for at in sorted(found)]


def rule_occurrence_input(rule_id: int, at: datetime) -> RuleOccurrenceInput:
    """Identity only: the rule's actions and conditions are read when the occurrence runs."""
    return {"rule": rule_id, "at": at}


def _scheduled_rules() -> QuerySet[AutomationRule]:
    return AutomationRule.objects.filter(RULES_DECIDING, schedules__is_active=True).distinct()


def rule_schedules_ensure(*, rule_ids: Iterable[int], now: datetime) -> int:
    """Make the rows of these rules' occurrences exist up to the horizon; how many were
    written. Rows already there are not touched (two queries when none is missing)."""
    rules = list(
        AutomationRule.objects.filter(RULES_DECIDING, pk__in=set(rule_ids))
        .select_related("farm")
        .prefetch_related(_active_schedules())
    )
    wanted: dict[str, tuple[AutomationRule, RuleOccurrence]] = {}
    for rule in rules:
        for occurrence in rule_occurrences(rule, now - BACKFILL, now + HORIZON):
            if occurrence.utc >= occurrence.schedule.updated_at:  # wanted since it was set
                key = scheduler_key(rule_schedule_key(rule_id=rule.pk, scheduled_on=occurrence.utc))
                wanted[key] = (rule, occurrence)
    # A row deactivated, cancelled or failed is ensured again (reactivated, history kept).
    present = set(
        DueWork.objects.filter(scheduler_key__in=list(wanted), status__in=_SETTLED).values_list(
            "scheduler_key", flat=True
        )
    )
    written = 0
    for key, (rule, occurrence) in wanted.items():
        if key in present:
            continue
        scheduler_ensure(
            key=rule_schedule_key(rule_id=rule.pk, scheduled_on=occurrence.utc),
            scheduled_on=occurrence.utc,
            input_hash=scheduler_input_hash(rule_occurrence_input(rule.pk, occurrence.utc)),
            time_zone_id=rule.farm.time_zone,
            scheduled_local_date=occurrence.local_date,
            trigger_type=TriggerType.RECURRING,
            farm_id=rule.farm_id,
            now=now,
        )
        written += 1
    return written


def rule_schedule_rows_sync(
    *, rule_id: int, now: datetime, reason: SchedulerReason = SchedulerReason.SETTING_CHANGED
) -> tuple[int, int]:
    """After an edit of a rule or its schedules: its pending rows the rule no longer wants are
    deactivated (``reason``: ``setting_changed``, or ``source_no_longer_valid`` for a deleted
    rule) and the wanted ones ensured; (ensured, deactivated). Completed rows stay as history;
    a row being processed is revalidated by its handler."""
    rule = (
        AutomationRule.objects.filter(pk=rule_id)
        .select_related("farm")
        .prefetch_related(_active_schedules())
        .first()
    )
    if rule is None:
        return 0, 0
    wanted: set[str] = set()
    if rule.is_active:
        wanted = {
            scheduler_key(rule_schedule_key(rule_id=rule.pk, scheduled_on=o.utc))
            for o in rule_occurrences(rule, now, now + HORIZON)
        }
    pending = DueWork.objects.filter(
        farm_id=rule.farm_id,  # the farm's index bounds the prefix match
        automation_type=AutomationType.RULE_SCHEDULE,
        status=SchedulerStatus.PENDING,
        scheduled_on__gte=now,
        scheduler_key__startswith=f"rule-schedule:{rule.pk}:",
    ).values_list("scheduler_key", flat=True)
    deactivated = sum(
        scheduler_deactivate_by_key(scheduler_key=key, reason=reason, now=now)
        for key in pending
        if key not in wanted
    )
    return rule_schedules_ensure(rule_ids=[rule.pk], now=now), deactivated


def rule_schedules_ensure_due(*, now: datetime, batch: int = ENSURE_BATCH) -> int:
    """Beat: every active rule with an active schedule, in bounded id-ordered batches."""
    after, written = 0, 0
    while True:
        ids = list(
            _scheduled_rules()
            .filter(pk__gt=after)
            .order_by("pk")
            .values_list("pk", flat=True)[:batch]
        )
        written += rule_schedules_ensure(rule_ids=ids, now=now)
        if len(ids) < batch:
            return written
        after = ids[-1]


# -- at due time ---------------------------------------------------------------------------


def rule_occurrence_resolve(job: SchedulerJob) -> tuple[AutomationRule, RuleOccurrence]:
    """The rule (as deciding needs it) and the occurrence the row stands for; the typed
    outcome when the row may no longer run."""
    try:
        spec = parse_scheduler_key(job.scheduler_key)
    except SchedulerKeyError as exc:
        raise PermanentFailure(str(exc)) from None
    if not isinstance(spec, RuleScheduleKey):
        raise PermanentFailure(f"not a rule-schedule key: {job.scheduler_key[:80]}")
    found = rules_loaded(
        AutomationRule.objects.filter(pk=int(spec.rule_id))
        .select_related("farm")
        .prefetch_related(_active_schedules()),
        active_only=False,
    )
    if not found:
        raise SourceNoLongerValid(f"rule {spec.rule_id} is gone")
    rule = found[0]
    if rule.deleted_at is not None:
        raise SourceNoLongerValid(f"rule {rule.pk} was deleted")
    if not rule.is_active:
        raise Deactivate(f"rule {rule.pk} is inactive", reason=SchedulerReason.SETTING_CHANGED)
    if rule.farm.archived_at is not None:
        raise Deactivate(f"farm {rule.farm_id} is archived", reason=SchedulerReason.SETTING_CHANGED)
    second = timedelta(seconds=1)
    occurrence = next(
        (
            o
            for o in rule_occurrences(rule, job.scheduled_on - second, job.scheduled_on + second)
            if o.utc == job.scheduled_on
        ),
        None,
    )
    if occurrence is None:
        raise Deactivate(
            "the rule's schedules no longer want this occurrence",
            reason=SchedulerReason.SETTING_CHANGED,
        )
    if scheduler_input_hash(rule_occurrence_input(rule.pk, occurrence.utc)) != job.input_hash:
        raise HoldForSupport("the reloaded occurrence hashes differently")
    return rule, occurrence


def rule_occurrence_run(job: SchedulerJob) -> HandlerResult:
    """Decide the occurrence (see the module docstring); its coordinates say what became of
    it and which commands it queued (dispatch is nudged after commit)."""
    rule, occurrence = rule_occurrence_resolve(job)
    trigger = Trigger(at=job.scheduled_on, occurrence_id=job.scheduler_id)
    actions = rule_actions(rule)
    late_s = (job.now - job.scheduled_on).total_seconds()
    coordinates: dict[str, JsonValue] = {
        "rule": rule.pk,
        "localTimeRule": occurrence.local_time_rule,
    }
    with transaction.atomic():
        endpoints = [a.endpoint.pk for a in actions]
        targets_lock(endpoints)
        targets, readings = targets_and_readings_load(endpoints, reading_ids([rule]))
        if late_s > occurrence.schedule.max_lateness_s:
            late = [
                Decision(trigger, rule, a, ExecutionOutcome.SKIPPED, ReasonCode.TOO_LATE)
                for a in actions
            ]
            decisions_persist(late, targets, job.now)
            return HandlerResult({**coordinates, "outcome": "skipped", "lateS": round(late_s)})
        if not rule_holds(rule, readings, at=job.now):
            return HandlerResult({**coordinates, "outcome": "conditions_not_met"})
        context = decision_context(targets, job.now)
        candidates = [Decision(trigger, rule, a) for a in actions]
        decisions, decided = candidates_decide(candidates, context)
        pending = decisions_persist(decisions, decided, job.now)
        hand_on_commit(Committed(commands=pending))
    outcomes = sorted({str(d.outcome) for d in decisions})
    # "intents" lists the commands made: the key these stored results have always had.
    return HandlerResult(
        {**coordinates, "outcome": "fired", "decisions": outcomes, "intents": pending}
    )
