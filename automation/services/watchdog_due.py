"""A watchdog's silence at due time (its scheduler row, ``automation.services.watchdog``).

The handler reloads the rule and its trigger endpoint: a rule gone or deleted, inactive, no
longer a watchdog, or asking a longer silence than has passed, deactivates the row (the
sweep ensures it again when the longer silence is reached); so does a reading that arrived
since the row was ensured (``readings resumed``: the silence is over and did not fire).
Otherwise each action takes the decision path of readings
(``automation.services.decisions``: priorities, gates, one command per endpoint), its
commands of origin ``watchdog``, and the watchdog's alarm is raised in the same transaction.
A re-run of the row (a lost claim, a redelivery) finds its executions and commands by their
unique keys and bumps the open alarm's count only.
"""

from __future__ import annotations

from datetime import timedelta

from django.db import transaction

from alarms.models import AlarmSeverity, AlarmSource, AlarmType
from alarms.services import alarm_raise
from automation.models import AutomationRule, Operator
from automation.services.conditions import reading_ids, rules_loaded
from automation.services.decisions import (
    Decision,
    Trigger,
    candidates_decide,
    decision_context,
    decisions_persist,
    rule_actions,
)
from automation.services.rule_checks import silence_seconds
from automation.services.spine import Committed, hand_on_commit
from automation.services.targets import targets_and_readings_load, targets_lock
from automation.services.watchdog import watchdog_input
from automation.states import CommandOrigin
from common.json_types import JsonValue
from scheduler.keys import (
    SchedulerKeyError,
    WatchdogKey,
    epoch_ms,
    epoch_ms_time,
    parse_scheduler_key,
    scheduler_input_hash,
)
from scheduler.registry import (
    Deactivate,
    HandlerResult,
    HoldForSupport,
    PermanentFailure,
    SchedulerJob,
    SourceNoLongerValid,
)
from scheduler.states import SchedulerReason

ALARM_ACTOR = "watchdog"


def watchdog_silence_resolve(job: SchedulerJob) -> AutomationRule:
    """The rule (as deciding needs it) whose silence the row stands for, still silent; the
    typed outcome when the row may no longer run."""
    try:
        spec = parse_scheduler_key(job.scheduler_key)
    except SchedulerKeyError as exc:
        raise PermanentFailure(str(exc)) from None
    if not isinstance(spec, WatchdogKey):
        raise PermanentFailure(f"not a watchdog key: {job.scheduler_key[:80]}")
    since = epoch_ms_time(int(spec.silent_since_epoch_ms))
    found = rules_loaded(
        AutomationRule.objects.filter(pk=int(spec.rule_id)).select_related(
            "trigger_endpoint__device", "trigger_endpoint__profile_endpoint"
        ),
        active_only=False,
    )
    if not found:
        raise SourceNoLongerValid(f"rule {spec.rule_id} is gone")
    rule = found[0]
    if rule.deleted_at is not None:
        raise SourceNoLongerValid(f"rule {rule.pk} was deleted")
    changed = SchedulerReason.SETTING_CHANGED
    if not rule.is_active:
        raise Deactivate(f"rule {rule.pk} is inactive", reason=changed)
    if rule.farm.archived_at is not None:
        raise Deactivate(f"farm {rule.farm_id} is archived", reason=changed)
    seconds = silence_seconds(rule.threshold_value)
    if rule.operator != Operator.SILENT_FOR or rule.trigger_endpoint is None or not seconds:
        raise Deactivate(f"rule {rule.pk} is no longer a watchdog", reason=changed)
    last_at = rule.trigger_endpoint.last_value_at
    if last_at is None or epoch_ms(last_at) != int(spec.silent_since_epoch_ms):
        raise SourceNoLongerValid("readings resumed")
    if job.now - since < timedelta(seconds=seconds):
        raise Deactivate(f"rule {rule.pk} now waits {seconds} s of silence", reason=changed)
    if scheduler_input_hash(watchdog_input(rule.pk, since)) != job.input_hash:
        raise HoldForSupport("the reloaded silence hashes differently")
    return rule


def watchdog_silence_run(job: SchedulerJob) -> HandlerResult:
    """Decide the silence (see the module docstring); its coordinates say what became of it
    and which commands it queued (dispatch is nudged after commit)."""
    rule = watchdog_silence_resolve(job)
    trigger = Trigger(
        at=job.scheduled_on, occurrence_id=job.scheduler_id, origin=CommandOrigin.WATCHDOG
    )
    actions = rule_actions(rule)
    coordinates: dict[str, JsonValue] = {"rule": rule.pk}
    with transaction.atomic():
        endpoints = [a.endpoint.pk for a in actions]
        targets_lock(endpoints)
        targets, _ = targets_and_readings_load(endpoints, reading_ids([rule]))
        context = decision_context(targets, job.now)
        candidates = [Decision(trigger, rule, a) for a in actions]
        decisions, decided = candidates_decide(candidates, context)
        pending = decisions_persist(decisions, decided, job.now)
        hand_on_commit(Committed(commands=pending))
        alarm = alarm_raise(
            farm_id=rule.farm_id,
            source=AlarmSource.RULE,
            source_id=rule.pk,
            type=AlarmType.WATCHDOG,
            severity=rule.alarm_severity or AlarmSeverity.MAJOR,
            detail=f"{rule.trigger_endpoint} silent for {rule.threshold_value} s: {rule.name}",
            actor=ALARM_ACTOR,
            now=job.now,
        )
    outcomes = sorted({str(d.outcome) for d in decisions})
    return HandlerResult(
        {
            **coordinates,
            "outcome": "fired",
            "decisions": outcomes,
            "intents": pending,  # the commands made: the stored results' key, kept
            "alarm": alarm,
        }
    )
