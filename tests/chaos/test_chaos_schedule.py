"""Time-based rules under a lost scheduler worker: the worker-scheduler process is SIGKILLed
(its whole process group, nothing acked) while rule-schedule occurrences are claimed and being
executed, then started again. Each occurrence still runs exactly once: one execution per
(occurrence, rule, target), one command per execution and target, one apply per commandId on
the device, and every occurrence's scheduler row ends completed. The killed claims come back
after SCHEDULER_LEASE_S (tests/chaos/harness.py FAST_TIMERS), well within the lateness."""

from __future__ import annotations

import time
from collections import Counter
from datetime import datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from django.db.models import Count, QuerySet
from django.utils import timezone

from automation.models import (
    AutomationRule,
    AutomationRuleAction,
    AutomationRuleExecution,
    AutomationRuleSchedule,
    DeviceCommand,
)
from automation.services.rule_schedules import rule_schedules_ensure
from automation.states import COMMAND_TERMINAL, CommandOrigin, CommandStatus, ReasonCode
from scheduler.models import DueWork, DueWorkTransition
from scheduler.states import SchedulerStatus
from tests.chaos.conftest import FAULTS, Chaos
from tests.chaos.harness import Proc, counters_read
from tests.chaos.report import SUMMARY
from tests.devices.factories import FarmKit
from tests.waiting import wait_for

pytestmark = [pytest.mark.chaos, pytest.mark.postgres]

# Relays whose fault lets every command through (the others' outcomes are the fault modes'
# business, tested in test_chaos.py): each kit gets an "on" and an "off" schedule-only rule.
CLEAN_FAULTS = {"none", "drop_ack:1", "delay_ack", "duplicate_ack"}
LEAD_S = 4  # the first occurrence, after the rows are ensured
OFF_AFTER_S = 4  # each kit's "off" occurrence follows its "on" one
KILLS = 3
MAX_LATENESS_S = 300  # a claim lost in the kill runs again after its lease, still in time
SETTLE_TIMEOUT_S = 120.0
RESTART_WAIT_S = 60.0


def _clean_kits(chaos: Chaos) -> list[FarmKit]:
    faults = FAULTS * len(chaos.fleet.kits)
    return [k for k, f in zip(chaos.fleet.kits, faults, strict=False) if f in CLEAN_FAULTS]


def _scheduled_rule(kit: FarmKit, at: datetime, *, on: bool) -> AutomationRule:
    """Schedule-only, two actions (the relay and its fan), one occurrence at ``at``."""
    rule = AutomationRule.objects.create(
        farm=kit.farm,
        name=f"scheduled {'on' if on else 'off'}",
        target_endpoint=kit.io1,
        target_value=on,
    )
    AutomationRuleAction.objects.create(
        rule=rule, target_endpoint=kit.fan, target_value=60 if on else 0
    )
    local = at.astimezone(ZoneInfo(kit.farm.time_zone)).time().replace(tzinfo=None)
    AutomationRuleSchedule.objects.create(
        rule=rule, local_time=local, max_lateness_s=MAX_LATENESS_S
    )
    return rule


def _rows(rules: list[AutomationRule]) -> list[DueWork]:
    """The rows of today's occurrences (ensure also writes tomorrow's, due in a day)."""
    keys = tuple(f"rule-schedule:{r.pk}:" for r in rules)
    found = DueWork.objects.filter(
        farm_id__in={r.farm_id for r in rules},
        scheduled_on__lt=timezone.now() + timedelta(hours=1),
    ).order_by("pk")
    return [row for row in found if row.scheduler_key.startswith(keys)]


def _released(landed: list[set[int]]) -> QuerySet[DueWorkTransition]:
    """The claims a kill met that were handed back to pending (the occurrence ran again)."""
    return DueWorkTransition.objects.filter(
        scheduler_id__in=set().union(*landed),
        from_status=SchedulerStatus.PROCESSING,
        to_status=SchedulerStatus.PENDING,
    )


def _kill_across_occurrences(chaos: Chaos, rules: list[AutomationRule]) -> list[set[int]]:
    """SIGKILL the scheduler worker each time it holds a fresh claim of an occurrence (one it
    had not claimed at an earlier kill), then start it again; the claimed rows per kill. At
    least KILLS kills, and more while none has yet met a claim that was still running (a
    claim seen processing may finish before the signal lands, the more so on a busy machine)."""
    worker = chaos.stack.procs["worker-scheduler"]
    seen: set[tuple[int, int]] = set()
    landed: list[set[int]] = []
    deadline = time.monotonic() + LEAD_S + OFF_AFTER_S + len(rules) + 30
    while time.monotonic() < deadline and not (len(landed) >= KILLS and _released(landed)):
        rows = _rows(rules)
        if all(r.status == SchedulerStatus.COMPLETED for r in rows):
            break
        fresh = {
            (r.pk, r.version)
            for r in rows
            if r.status == SchedulerStatus.PROCESSING and (r.pk, r.version) not in seen
        }
        if not fresh:
            time.sleep(0.01)
            continue
        worker.kill()
        seen |= fresh
        landed.append({pk for pk, _ in fresh})
        time.sleep(1.0)
        worker.start()
        _wait_ready(worker)
    return landed


def _wait_ready(worker: Proc) -> None:
    def ready() -> bool:
        return worker.log.read_bytes().count(b" ready.") >= worker.starts

    wait_for(ready, f"{worker.name} restarted", RESTART_WAIT_S)


def _settle(chaos: Chaos, rules: list[AutomationRule], kits: list[FarmKit]) -> None:
    def settled() -> bool:
        rows = _rows(rules)
        live = (
            DeviceCommand.objects.filter(target_device__in=[k.actuator for k in kits])
            .exclude(status__in=COMMAND_TERMINAL)
            .exists()
        )
        return bool(rows) and all(r.status == SchedulerStatus.COMPLETED for r in rows) and not live

    try:
        wait_for(settled, "every occurrence completed and its commands final", SETTLE_TIMEOUT_S)
    except AssertionError:
        print(chaos.stack.tails())  # the outcome below names what was left


def test_a_scheduler_worker_killed_across_occurrences_runs_each_once(chaos: Chaos) -> None:
    started = time.monotonic()
    kits = _clean_kits(chaos)
    base = (timezone.now() + timedelta(seconds=LEAD_S)).replace(microsecond=0)
    rules: list[AutomationRule] = []
    for n, kit in enumerate(kits):
        at = base + timedelta(seconds=n)
        rules.append(_scheduled_rule(kit, at, on=True))
        rules.append(_scheduled_rule(kit, at + timedelta(seconds=OFF_AFTER_S), on=False))
    assert rule_schedules_ensure(rule_ids=[r.pk for r in rules], now=timezone.now()) >= len(rules)
    occurrences = {r.pk for r in _rows(rules)}
    assert len(occurrences) == len(rules)

    landed = _kill_across_occurrences(chaos, rules)
    _settle(chaos, rules, kits)
    chaos.stack.procs["simulator"].stop()  # it writes its counters as it stops
    problems = _problems(chaos, rules, occurrences)
    _summary_add(rules, landed, problems, time.monotonic() - started)
    assert landed, "no kill landed while an occurrence was claimed"
    assert _released(landed).exists(), "every claim a kill met had finished: none ran again"
    assert problems == [], "\n".join(problems)


def _summary_add(
    rules: list[AutomationRule], landed: list[set[int]], problems: list[str], seconds: float
) -> None:
    """The scenario's line in the chaos table (no readings, no reminders)."""
    intents = DeviceCommand.objects.filter(rule__in=rules)
    unfinished = sum(r.status != SchedulerStatus.COMPLETED for r in _rows(rules))
    SUMMARY.append(
        (
            f"SIGKILL scheduler ({len(landed)} kills, {sum(map(len, landed))} claims lost)",
            0,
            intents.count(),
            intents.filter(status=CommandStatus.APPLIED).count(),
            intents.filter(attempt_count__gt=1).count(),
            intents.filter(status=CommandStatus.UNCERTAIN).count(),
            intents.filter(status_reason=ReasonCode.SUPERSEDED).count(),
            intents.filter(status__in=[CommandStatus.FAILED, CommandStatus.EXPIRED])
            .exclude(status_reason=ReasonCode.SUPERSEDED)
            .count(),
            0,
            unfinished,
            sum("twice" in p for p in problems),
            f"{seconds:.0f}",
        )
    )


def _problems(chaos: Chaos, rules: list[AutomationRule], occurrences: set[int]) -> list[str]:
    rows = _rows(rules)
    problems = [f"row {r.scheduler_key} ended {r.status}" for r in rows if r.status != "completed"]
    executions = AutomationRuleExecution.objects.filter(rule__in=rules)
    per_target = executions.values("occurrence", "rule", "target_endpoint").annotate(n=Count("pk"))
    problems += [f"execution {e} recorded twice" for e in per_target if e["n"] > 1]
    decided = Counter(executions.values_list("occurrence", flat=True))
    problems += [
        f"occurrence {pk} has {decided[pk]} executions, not one per action (2)"
        for pk in occurrences
        if decided[pk] != 2
    ]
    intents = list(DeviceCommand.objects.filter(rule__in=rules))
    commanded = Counter(i.rule_execution_id for i in intents)
    problems += [f"execution {pk} made {n} commands twice" for pk, n in commanded.items() if n > 1]
    by_occurrence = Counter(
        executions.filter(pk__in=commanded).values_list("occurrence", flat=True)
    )
    problems += [
        f"occurrence {pk} made {by_occurrence[pk]} commands, not one per target (2)"
        for pk in occurrences
        if by_occurrence[pk] != 2
    ]
    problems += [
        f"intent {i.pk} has origin {i.origin}"
        for i in intents
        if i.origin != CommandOrigin.SCHEDULE
    ]
    applies = counters_read(chaos.counters_path).applies
    for intent in intents:
        n = applies.get((intent.target_serial_number, intent.device_command_id or ""), 0)
        if n > 1:
            problems.append(f"device applied {intent.device_command_id} twice ({n})")
        if intent.status_reason == ReasonCode.STATE_REPORTED and n != 1:
            problems.append(f"intent {intent.pk} applied by a state report the device never sent")
    dead = chaos.stack.dead()
    if dead:
        problems.append(f"processes died on their own: {', '.join(dead)}")
    return problems
