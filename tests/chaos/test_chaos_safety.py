"""A greenhouse whose temperature sensor falls silent while its heater is on, with the
scheduler and evaluate workers SIGKILLed across the due times of the watchdog and of the
heater's run-time limit.

Setup: a heater rule (temp < 20 → heater on, ``max_on_s`` 30), a watchdog ("temperature silent
20 s → heater off", critical alarm) and the heater's safe value off. The sensor reports cold
once, then says nothing. The heater must end off within the watchdog's window plus one sweep
(and the lease a killed claim waits out), applied once per commandId; the run-time limit's
follow-up is dropped because the watchdog changed the heater first; one alarm is raised and
notified once per recipient and channel, repeated until acknowledged; when the sensor comes
back the alarm clears by itself."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.utils import timezone

from alarms.models import Alarm, AlarmPolicy, AlarmStatus, AlarmTransition, AlarmType
from alarms.services import alarm_acknowledge
from automation.models import AutomationRule, AutomationRuleExecution, DeviceCommand
from automation.services.rules import rule_create
from automation.states import CommandOrigin, CommandStatus
from notifications.models import Notification
from scheduler.models import DueWork
from scheduler.states import SchedulerStatus
from tests.chaos.conftest import FAULTS, Chaos, stack_running
from tests.chaos.harness import Proc, Stack, counters_read
from tests.devices.factories import FarmKit
from tests.waiting import wait_for

pytestmark = [pytest.mark.chaos, pytest.mark.postgres]

SILENCE_S = 20  # the watchdog's window
MAX_ON_S = 30  # the heater's run-time limit
REPEAT_EVERY_S = 3  # the alarm's notifications repeat this often until acknowledged
SWEEP_S = 1.0
LEASE_S = 5.0  # SCHEDULER_LEASE_S of FAST_TIMERS: a killed claim runs again after it
SAFETY_TIMERS = {
    "WATCHDOG_SWEEP_INTERVAL_S": str(SWEEP_S),
    "DEVICE_HEALTH_SWEEP_INTERVAL_S": str(SWEEP_S),
    "ALARMS_NOTIFY_INTERVAL_S": str(SWEEP_S),
}
RESTART_WAIT_S = 60.0
RESTART_S = 8.0  # a killed worker is back and ready within this, as a rule, on this stack
SETTLE_TIMEOUT_S = 120.0


@pytest.fixture(scope="module")
def chaos_stack(
    django_db_setup: None, django_db_blocker: Any, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Stack]:
    """The chaos stack with sweeps of a second for watchdogs, device health and alarms."""
    with stack_running(django_db_blocker, tmp_path_factory, SAFETY_TIMERS) as stack:
        yield stack


def _greenhouse(chaos: Chaos) -> tuple[FarmKit, AutomationRule, AutomationRule]:
    """A kit whose relay has no fault; its io1 is the heater. The fleet's own rules of that
    farm are switched off, so the heater rule and the watchdog alone decide it."""
    kit = next(k for k, f in zip(chaos.fleet.kits, FAULTS, strict=False) if f == "none")
    AutomationRule.objects.filter(farm=kit.farm).update(is_active=False)
    endpoint = kit.io1.profile_endpoint
    endpoint.safe_value = False
    endpoint.save(update_fields=["safe_value"])
    AlarmPolicy.objects.update_or_create(farm=kit.farm, defaults={"repeat_every_s": REPEAT_EVERY_S})
    heater = rule_create(
        farm=kit.farm,
        name="heat when cold",
        trigger_endpoint=kit.temp,
        operator="lt",
        threshold_value=20,
        target_endpoint=kit.io1,
        target_value=True,
        max_on_s=MAX_ON_S,
    )
    watchdog = rule_create(
        farm=kit.farm,
        name="sensor silent: heater off",
        trigger_endpoint=kit.temp,
        operator="silent_for",
        threshold_value=SILENCE_S,
        target_endpoint=kit.io1,
        target_value=False,
        alarm_severity="critical",
    )
    return kit, heater, watchdog


def _reading_now(chaos: Chaos, kit: FarmKit, temp: float) -> datetime:
    """A reading stamped with the wall clock (the watchdog measures silence on device time)."""
    with chaos.sensors.held():
        chaos.sensors._clock = max(chaos.sensors.clock, datetime.now(UTC))
        chaos.sensors._reading(kit.sensor.serial_number, temp)
        return chaos.sensors.clock


def _rows(kit: FarmKit, prefix: str) -> list[DueWork]:
    return [
        r
        for r in DueWork.objects.filter(farm_id=kit.farm.pk).order_by("pk")
        if r.scheduler_key.startswith(prefix)
    ]


def _restart(proc: Proc) -> None:
    proc.kill()
    proc.start()
    wait_for(
        lambda: proc.log.read_bytes().count(b" ready.") >= proc.starts,
        f"{proc.name} restarted",
        RESTART_WAIT_S,
    )


def _kill_across_due_times(
    chaos: Chaos, kit: FarmKit, watchdog: AutomationRule, dues: list[datetime]
) -> int:
    """SIGKILL the scheduler and evaluate workers just before each due time (the watchdog's
    silence, the run-time limit) and whenever the scheduler holds a claim of this farm's
    rows, until both rows are final; how many kills there were."""
    procs = [chaos.stack.procs[f"worker-{n}"] for n in ("scheduler", "evaluate")]
    kills, seen, pending = 0, set(), sorted(dues)
    deadline = time.monotonic() + SILENCE_S + MAX_ON_S + 4 * RESTART_WAIT_S
    rows: list[DueWork] = []
    while time.monotonic() < deadline:
        rows = _rows(kit, f"watchdog:{watchdog.pk}:") + _rows(kit, "run-limit:")
        live = (SchedulerStatus.PENDING, SchedulerStatus.PROCESSING)
        if len(rows) >= 2 and not pending and all(r.status not in live for r in rows):
            return kills
        held = {(r.pk, r.version) for r in rows if r.status == SchedulerStatus.PROCESSING}
        due = bool(pending) and timezone.now() >= pending[0] - timedelta(seconds=0.5)
        if held - seen or due:
            seen |= held
            if due:
                pending.pop(0)
            kills += 1
            for proc in procs:
                _restart(proc)
            continue
        time.sleep(0.02)
    raise AssertionError(f"the watchdog's and the limit's rows did not end: {rows}")


def test_a_silent_sensor_turns_its_heater_off_once_and_its_alarm_clears(chaos: Chaos) -> None:
    kit, heater, watchdog = _greenhouse(chaos)
    started = timezone.now()
    _reading_now(chaos, kit, 15.0)  # cold: the heater goes on
    on = DeviceCommand.objects.filter(rule=heater, status=CommandStatus.APPLIED)
    wait_for(on.exists, "the heater on", SETTLE_TIMEOUT_S)
    applied_at = on.get().applied_at
    kit.temp.refresh_from_db()
    silent_from = kit.temp.last_value_at
    assert silent_from is not None and applied_at is not None
    dues = [silent_from + timedelta(seconds=SILENCE_S), applied_at + timedelta(seconds=MAX_ON_S)]
    kills = _kill_across_due_times(chaos, kit, watchdog, dues)

    commands = list(
        DeviceCommand.objects.filter(
            target_device_endpoint=kit.io1, created_at__gte=started
        ).order_by("pk")
    )
    offs = [c for c in commands if c.origin == CommandOrigin.WATCHDOG]
    assert len(offs) == 1, [(c.pk, c.origin, c.status) for c in commands]
    off = offs[0]
    wait_for(
        lambda: DeviceCommand.objects.get(pk=off.pk).status == CommandStatus.APPLIED,
        "the watchdog's command applied",
        SETTLE_TIMEOUT_S,
    )
    off.refresh_from_db()
    assert commands[-1].pk == off.pk, "a later command followed the watchdog's"
    assert off.applied_at is not None
    late_s = (off.applied_at - silent_from).total_seconds()
    print(f"heater off applied {late_s:.1f} s after the last reading; {kills} kills")
    # The window, one sweep, the lease of a claim a kill met, and the command's own trip.
    assert late_s <= SILENCE_S + SWEEP_S + LEASE_S + RESTART_S * kills + 10, late_s
    assert not [c for c in commands if c.origin == CommandOrigin.RUN_LIMIT], "limit not dropped"
    limit_rows = _rows(kit, "run-limit:")
    assert [r.status for r in limit_rows] == [SchedulerStatus.DEACTIVATED], limit_rows
    silence_rows = _rows(kit, f"watchdog:{watchdog.pk}:")
    assert [r.status for r in silence_rows] == [SchedulerStatus.COMPLETED], silence_rows
    executions = AutomationRuleExecution.objects.filter(rule=watchdog)
    assert executions.count() == 1
    applies = counters_read(chaos.counters_path).applies
    twice = {k: n for k, n in applies.items() if n > 1}
    assert not twice, f"applied twice on the device: {twice}"

    alarm = Alarm.objects.get(source_id=watchdog.pk, type=AlarmType.WATCHDOG)
    wait_for(
        lambda: Alarm.objects.get(pk=alarm.pk).notify_count >= 2,
        "the alarm's notification repeated",
        SETTLE_TIMEOUT_S,
    )
    assert alarm_acknowledge(
        alarm_id=alarm.pk, actor="grower", comment="on my way", now=timezone.now()
    )
    alarm.refresh_from_db()
    repeats = alarm.notify_count
    assert alarm.next_notify_at is None

    _reading_now(chaos, kit, 21.0)  # the sensor is back
    wait_for(
        lambda: Alarm.objects.get(pk=alarm.pk).status == AlarmStatus.CLEARED,
        "the alarm cleared by itself",
        SETTLE_TIMEOUT_S,
    )
    alarm.refresh_from_db()
    assert alarm.notify_count == repeats, "a repeat after the acknowledgement"
    assert alarm.count == 1
    trail = list(
        AlarmTransition.objects.filter(alarm=alarm).order_by("pk").values_list("to_status", "actor")
    )
    assert trail[-2][0] == AlarmStatus.ACKNOWLEDGED and trail[-2][1] == "grower", trail
    assert trail[-1][0] == AlarmStatus.CLEARED, trail
    notes = Notification.objects.filter(source_key__startswith=f"alarm:{alarm.pk}:")
    keys = set(notes.values_list("source_key", "recipient_key", "channel"))
    assert len(keys) == notes.count() > 0
    assert {k.rsplit(":", 1)[1] for k, _, _ in keys} == {str(n) for n in range(1, repeats + 1)}
    reposted = [nid for nid, n in chaos.hook.posts.items() if n > 1]
    assert not reposted, f"notifications posted twice: {reposted}"
    assert not chaos.stack.dead(), chaos.stack.dead()
