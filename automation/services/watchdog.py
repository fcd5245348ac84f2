"""Watchdogs: a rule whose trigger condition is ``silent_for`` N seconds fires when its trigger
endpoint has had no reading for N seconds, once per silence, and re-arms with the next reading.

* The clock is the endpoint's ``last_value_at``: the device time of its newest reading (its
  arrival time when the device sends no ``ts``). It is the time every other condition's
  freshness is judged by (``condition_window_s``), so a watchdog and a threshold rule agree on
  what a stale reading is; and a late copy of an old reading (a buffer replayed after a
  reconnection) does not move it, so it does not count as the sensor being back. A device
  clock running ahead delays the watchdog by at most ``TELEMETRY_MAX_FUTURE_S``. An endpoint
  never heard from has no silence to measure: its watchdog is not armed.
* One silence is one scheduler row, key ``watchdog:{ruleId}:{silentSinceEpochMs}`` (the time
  of the last reading before it), so a silence fires once whatever sweeps, redeliveries or
  crashes happen, and the next reading starts a new key: it re-arms.
* Beat's sweep (``watchdogs_sweep``) ensures the row once the silence has lasted N seconds,
  due at once; the handler (``automation.services.watchdog_due``) decides it.
* While its trigger endpoint stays silent a watchdog holds its endpoints against rules of a
  lower priority (``watchdog_holds_active``); a watchdog created without a priority gets
  ``rule_checks.WATCHDOG_PRIORITY``, the top one.
* Its alarm (type ``watchdog``) is raised when it fires and cleared by the sweep once the
  endpoint reports again (``readings resumed``).

The sweep reads two indexed rows sets when nothing changed: the active watchdogs with their
endpoint's last reading time, and the open watchdog alarms. A due-work read and writes follow
only for a silence not yet fired or an alarm to clear.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TypedDict

from django.db.models import Q

from alarms.models import Alarm, AlarmSource, AlarmStatus, AlarmType
from alarms.services import alarm_clear_by_cause
from automation.models import AutomationRule, AutomationRuleAction, Operator
from automation.services.conditions import RULES_DECIDING
from automation.services.rule_checks import silence_seconds
from common.handoff import enqueue_on_commit
from config.task_names import SCHEDULER_POLL_DUE
from scheduler.key_parts import epoch_ms, epoch_ms_time
from scheduler.keys import scheduler_input_hash, scheduler_key, watchdog_key
from scheduler.models import DueWork, TriggerType
from scheduler.services import scheduler_ensure
from scheduler.states import SchedulerStatus

READINGS_RESUMED = "readings resumed"
SWEEP_BATCH = 1000  # watchdogs per read; an alarm read is bounded the same
# A row in these states stands for its silence; one deactivated, cancelled or failed (the
# rule was inactive then, say) is ensured again while the silence lasts.
_SETTLED = (SchedulerStatus.PENDING, SchedulerStatus.PROCESSING, SchedulerStatus.COMPLETED)
_OPEN = (AlarmStatus.ACTIVE, AlarmStatus.ACKNOWLEDGED)
WATCHDOGS = RULES_DECIDING & Q(operator=Operator.SILENT_FOR)


class WatchdogInput(TypedDict):
    """What a silence's scheduler row is hashed from: its identity only."""

    rule: int
    since: datetime


@dataclass(frozen=True)
class Watchdog:
    """An active watchdog rule as the sweep reads it."""

    rule_id: int
    farm_id: int
    silence_s: int
    last_reading_at: datetime

    def silent(self, now: datetime) -> bool:
        return now - self.last_reading_at >= timedelta(seconds=self.silence_s)

    @property
    def due_at(self) -> datetime:
        return self.last_reading_at + timedelta(seconds=self.silence_s)


@dataclass
class WatchdogSweep:
    """What one sweep did: rows ensured (silences to fire) and alarms cleared."""

    watchdogs: int = 0
    silent: int = 0
    ensured: list[int] = field(default_factory=list)
    cleared: int = 0


def watchdog_input(rule_id: int, since: datetime) -> WatchdogInput:
    return {"rule": rule_id, "since": since}


def watchdogs_active(*, after: int = 0, limit: int = SWEEP_BATCH) -> list[Watchdog]:
    """Active watchdogs whose trigger endpoint was heard from, in id order (one read)."""
    rows = (
        AutomationRule.objects.filter(
            WATCHDOGS, pk__gt=after, trigger_endpoint__last_value_at__isnull=False
        )
        .order_by("pk")
        .values_list("pk", "farm_id", "threshold_value", "trigger_endpoint__last_value_at")
    )[:limit]
    found = []
    for pk, farm_id, threshold, last_at in rows:
        seconds = silence_seconds(threshold)
        if seconds is not None and last_at is not None:
            # The silence's key keeps milliseconds, and the row's input is hashed from what
            # the key says: the handler re-derives both from the key alone.
            found.append(Watchdog(pk, farm_id, seconds, epoch_ms_time(epoch_ms(last_at))))
    return found


def watchdogs_sweep(*, now: datetime, batch: int = SWEEP_BATCH) -> WatchdogSweep:
    """Beat: ensure one row per silence that has lasted its N seconds and clear the alarms of
    watchdogs whose endpoint reported again. Safe when two beats run it at once (the key and
    the alarm's compare-and-set absorb the second)."""
    result = WatchdogSweep()
    after = 0
    watchdogs: list[Watchdog] = []
    while True:
        found = watchdogs_active(after=after, limit=batch)
        watchdogs.extend(found)
        if len(found) < batch:
            break
        after = found[-1].rule_id
    result.watchdogs = len(watchdogs)
    alarmed = _alarms_open(batch)
    silent = [w for w in watchdogs if w.silent(now)]
    result.silent = len(silent)
    # An open alarm raised since the silence began: this silence has fired (no row to read).
    unfired = [w for w in silent if not _fired(w, alarmed.get(w.rule_id))]
    result.ensured = _silences_ensure(unfired, now)
    if result.ensured:
        # The rows are claimed at once, not at the next due poll: a silence fires within one
        # sweep, not one sweep plus one poll.
        enqueue_on_commit(SCHEDULER_POLL_DUE)
    by_rule = {w.rule_id: w for w in watchdogs}
    for rule_id, raised_at in alarmed.items():
        watchdog = by_rule.get(rule_id)
        # Reported since: no longer silent, or a reading came after the alarm (and a new
        # silence began, whose own row was ensured above).
        if watchdog is not None and (
            not watchdog.silent(now) or watchdog.last_reading_at > raised_at
        ):
            result.cleared += alarm_clear_by_cause(
                source=AlarmSource.RULE,
                source_id=rule_id,
                type=AlarmType.WATCHDOG,
                cause=READINGS_RESUMED,
                now=now,
            )
    return result


def _fired(watchdog: Watchdog, raised_at: datetime | None) -> bool:
    return raised_at is not None and raised_at >= watchdog.last_reading_at


def _alarms_open(limit: int) -> dict[int, datetime]:
    """Rule id → when its open watchdog alarm was first raised (one bounded read)."""
    rows = Alarm.objects.filter(
        source=AlarmSource.RULE, type=AlarmType.WATCHDOG, status__in=_OPEN
    ).values_list("source_id", "first_raised_at")[:limit]
    return dict(rows)


def _silences_ensure(silent: list[Watchdog], now: datetime) -> list[int]:
    """Each silence's row, written only where none stands for it yet (one read)."""
    if not silent:
        return []
    keys = {
        scheduler_key(watchdog_key(rule_id=w.rule_id, silent_since=w.last_reading_at)): w
        for w in silent
    }
    present = set(
        DueWork.objects.filter(scheduler_key__in=list(keys), status__in=_SETTLED).values_list(
            "scheduler_key", flat=True
        )
    )
    ensured = []
    for key, w in keys.items():
        if key in present:
            continue
        result = scheduler_ensure(
            key=watchdog_key(rule_id=w.rule_id, silent_since=w.last_reading_at),
            scheduled_on=w.due_at,
            input_hash=scheduler_input_hash(watchdog_input(w.rule_id, w.last_reading_at)),
            trigger_type=TriggerType.THRESHOLD_CONDITION,
            farm_id=w.farm_id,
            now=now,
        )
        ensured.append(result.scheduler_id)
    return ensured


@dataclass(frozen=True)
class WatchdogHold:
    """A silent watchdog holding an endpoint: decisions of rules below ``priority`` wait."""

    rule_id: int
    priority: int


def watchdog_holds_active(endpoint_ids: Iterable[int], *, now: datetime) -> dict[int, WatchdogHold]:
    """Endpoint id → the highest-priority watchdog holding it at ``now``: an active watchdog
    that drives the endpoint (its target or a further action's) and whose trigger endpoint
    has been silent for its N seconds. Two queries, whatever the number of endpoints."""
    ids = set(endpoint_ids)
    if not ids:
        return {}
    acting = AutomationRuleAction.objects.filter(target_endpoint_id__in=ids).values("rule_id")
    rows = AutomationRule.objects.filter(
        WATCHDOGS,
        Q(target_endpoint_id__in=ids) | Q(pk__in=acting),
        trigger_endpoint__last_value_at__isnull=False,
    ).values_list(
        "pk", "priority", "threshold_value", "trigger_endpoint__last_value_at", "target_endpoint_id"
    )
    rules: dict[int, tuple[WatchdogHold, int]] = {}
    for pk, priority, threshold, last_at, target in rows:
        seconds = silence_seconds(threshold)
        if seconds and last_at is not None and now - last_at >= timedelta(seconds=seconds):
            rules[pk] = (WatchdogHold(pk, priority), target)
    if not rules:
        return {}
    held: dict[int, WatchdogHold] = {}
    further = AutomationRuleAction.objects.filter(
        rule_id__in=list(rules), target_endpoint_id__in=ids
    ).values_list("rule_id", "target_endpoint_id")
    pairs = [(target, hold) for hold, target in rules.values()]
    pairs += [(endpoint, rules[rule_id][0]) for rule_id, endpoint in further]
    for endpoint, hold in pairs:
        if endpoint in ids and (endpoint not in held or hold.priority > held[endpoint].priority):
            held[endpoint] = hold
    return held
