"""``bench --distributed --soak SECONDS``: the deployed stack at one rate for a long time,
with every table's retention shortened so partitions roll and prunes run while it is
measured. Crossings go out from a thread at their scheduled times; the main thread
accounts each 30 s after it went out (``ACCOUNT_AFTER_S``, long enough at half capacity for
its command to end), samples processes, queues and tables at each interval and prints a
block, and at the end fits the trends (``trend``) and fails if one rises. As the
distributed bench does, it deletes its rows and stops its processes on the way out, and
puts the beat schedule back to the configured intervals."""

from __future__ import annotations

import io
import json
import math
import threading
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from time import perf_counter
from typing import Any

from django.core.management import call_command
from django.test import override_settings

from automation.models import DeviceCommand
from common.models import Organization
from devices.models import Device
from devtools.bench import BenchError
from devtools.bench.distributed.accounting import sensor_ids, step_account, step_settle
from devtools.bench.distributed.broker import queue_backlog
from devtools.bench.distributed.cost import vacuum_when_autovacuum_is_off
from devtools.bench.distributed.devices import (
    COLD_READING_C,
    HOT_READING_C,
    Offered,
    TimedSimulator,
)
from devtools.bench.distributed.plan import STAGES, DistributedPlan
from devtools.bench.distributed.procs import CpuMeter
from devtools.bench.distributed.results import StepResult
from devtools.bench.distributed.run import machine_describe, servers_check
from devtools.bench.distributed.schedule import step_crossings
from devtools.bench.distributed.soak_plan import SoakPlan
from devtools.bench.distributed.soak_report import (
    Interval,
    partitions_lines,
    partitions_rolled,
    settings_table,
    soak_series,
    storage_cost,
    summary_table,
)
from devtools.bench.distributed.soak_sample import (
    measured_tables,
    rss_sample,
    server_pids,
    tables_sample,
)
from devtools.bench.distributed.stack import Stack, stack_running
from devtools.bench.distributed.trend import trends_fit, trends_table, window_start
from devtools.bench.fleet import BenchFleet, fleet_seeded
from devtools.bench.report import Progress

Write = Callable[[str], None]
ACCOUNT_AFTER_S = 30.0
TICK_S = 5.0
CHUNK_S = 10.0  # the schedule is made this many seconds at a time
RELAYS_SEEN_EVERY_S = 60.0  # relays send no telemetry here: keep dispatch's freshness gate open
SEEN_KEEP_S = 300.0  # first-seen times older than this were accounted long ago


class Offering(threading.Thread):
    """Crossings at ``rate``/s for ``seconds``, each at its time from the start (no drift
    however long the run), round-robin over the farms as ``schedule`` alternates them."""

    def __init__(self, simulator: TimedSimulator, fleet: BenchFleet, soak: SoakPlan) -> None:
        super().__init__(name="soak-offering", daemon=True)
        self._simulator, self._fleet, self._soak = simulator, fleet, soak
        self._stop_event = threading.Event()
        self._lock = threading.Lock()
        self._pending: list[Offered] = []
        self.sent = 0
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            self._offer()
        except BaseException as exc:  # handed to the main thread by check()
            self.error = exc

    def _offer(self) -> None:
        rate, sensors = self._soak.rate, self._fleet.sensors
        total = max(1, round(rate * self._soak.seconds))
        started = perf_counter()
        while self.sent < total:
            count = min(total - self.sent, max(1, round(rate * CHUNK_S)))
            for crossing in step_crossings(
                step=1, rate=rate, seconds=count / rate, farms=len(sensors), first_index=self.sent
            ):
                wait_s = started + crossing.index / rate - perf_counter()
                if self._stop_event.wait(max(0.0, wait_s)):
                    return
                serial, ts = sensors[crossing.farm], datetime.now(UTC)
                temp = HOT_READING_C if crossing.hot else COLD_READING_C
                self._simulator.publish_telemetry(serial, {"temp": temp}, ts=ts)
                with self._lock:
                    self._pending.append(Offered(crossing, serial, ts))
                    self.sent += 1

    def stop(self) -> None:
        self._stop_event.set()
        self.join(timeout=5)

    def check(self) -> None:
        if self.error is not None:
            raise BenchError(f"offering crossings failed: {self.error!r}") from self.error

    def take(self, before: datetime | None = None) -> list[Offered]:
        """The crossings that went out before ``before`` (all of them without it)."""
        with self._lock:
            n = len(self._pending)
            if before is not None:
                n = next((i for i, o in enumerate(self._pending) if o.ts >= before), n)
            taken, self._pending = self._pending[:n], self._pending[n:]
        return taken


def soak_run(plan: DistributedPlan, write: Write, note: Write) -> None:
    """The whole soak; tables to ``write``, progress to ``note``. BenchError when a trend
    rises or a crossing was lost, after every table and the JSON are written."""
    soak = plan.soak
    if soak is None:
        raise BenchError("soak_run needs a plan with --soak")
    servers_check()
    run = uuid.uuid4().hex[:8]
    out = plan.out_dir / run
    out.mkdir(parents=True, exist_ok=True)
    write(f"command: {plan.command_line()}")
    write(machine_describe())
    write(f"soak: {soak.seconds:g} s at {soak.rate:g} crossings/s over {plan.farms:,} farms, "
          f"a sample every {soak.interval_s:g} s; every process runs with:")  # fmt: skip
    write(settings_table(soak.env()))
    note("setup: migrate (with the soak's settings), sync_beat_schedule")
    with override_settings(**soak.migrate_settings()):
        call_command("migrate", interactive=False, verbosity=0)
    _foreign_rows_refuse()
    intervals: list[Interval] = []
    try:
        with override_settings(**soak.settings()):
            call_command("sync_beat_schedule", stdout=io.StringIO())
        with fleet_seeded(
            tag=f"{run}s", farms=plan.farms, sensors_per_farm=1, relays=True
        ) as fleet:
            note(f"setup: seeded {plan.farms:,} farms (sensor + relay, hot/cool rules)")
            with stack_running(plan, run, out, note, extra_env=soak.env()) as stack:
                intervals = _soak_drive(plan, soak, stack, fleet, write, note)
            devices = len(fleet.sensors) + len(fleet.relays)
    finally:
        call_command("sync_beat_schedule", stdout=io.StringIO())
        note("setup: beat schedule back to the configured intervals")
    write(f"logs: {out}")
    _soak_report(plan, intervals, devices, write)


def _foreign_rows_refuse() -> None:
    """Beat prunes every table with the shortened retention, whoever's rows they are."""
    foreign = Organization.objects.exclude(name__startswith="bench-").count()
    if foreign:
        raise BenchError(
            f"this database holds {foreign:,} organisation(s) not the bench's: the soak shortens "
            "every table's retention, so beat would prune their rows too. Point DATABASE_URL "
            "at a database of its own."
        )


def _soak_drive(
    plan: DistributedPlan,
    soak: SoakPlan,
    stack: Stack,
    fleet: BenchFleet,
    write: Write,
    note: Write,
) -> list[Interval]:
    servers = server_pids()
    note("soak: servers measured on this machine: " + (", ".join(sorted(servers)) or "none"))
    if vacuum_when_autovacuum_is_off():
        note("soak: autovacuum is off on this server: VACUUM ANALYZE after each sample, as "
             "a deployment's autovacuum would keep up (dead tuples: one interval's)")  # fmt: skip
    simulator = TimedSimulator(fleet, stack.mqtt)
    simulator.start()
    try:
        drive = _Drive(plan, soak, stack, fleet, simulator, stack.pids() | servers)
        write("\nSoak: baseline, before the first crossing")
        write(drive.intervals[0].block())
        drive.run(write)
    finally:
        simulator.stop()
    return drive.intervals


class _Drive:
    """The soak's clock: crossings accounted ``ACCOUNT_AFTER_S`` after they went out, each
    into the interval it went out in; an interval's processes, queues and tables sampled at
    its end and its block printed once its last crossings are accounted."""

    def __init__(
        self,
        plan: DistributedPlan,
        soak: SoakPlan,
        stack: Stack,
        fleet: BenchFleet,
        simulator: TimedSimulator,
        pids: dict[str, int],
    ) -> None:
        self.plan, self.soak, self.stack, self.fleet = plan, soak, stack, fleet
        self.simulator, self.pids = simulator, pids
        self.devices, self.tables = sensor_ids(fleet), measured_tables()
        self.count = max(1, math.ceil(soak.seconds / soak.interval_s - 1e-9))
        baseline = Interval(0, 0.0, 0.0, rss=rss_sample(pids), backlog=queue_backlog(STAGES))
        baseline.tables = tables_sample(self.tables)
        self.intervals = [baseline] + [Interval(k, 0.0, 0.0) for k in range(1, self.count + 1)]
        self.offering = Offering(simulator, fleet, soak)
        self.started = time.monotonic()
        self.wall = datetime.now(UTC)

    def run(self, write: Write) -> None:
        progress = Progress("soak")
        sampled, printed, relays_at = 0, 0, 0.0
        meter = CpuMeter(self.pids)
        self.started, self.wall = time.monotonic(), datetime.now(UTC)
        self.offering.start()
        try:
            while printed < self.count:
                now = time.monotonic()
                self.stack.check_alive()
                self.offering.check()
                if now >= relays_at:
                    _relays_seen(self.fleet)
                    relays_at = now + RELAYS_SEEN_EVERY_S
                if sampled < self.count and now >= self._due(sampled + 1):
                    sampled += 1
                    self._sample(self.intervals[sampled], meter)
                    meter = CpuMeter(self.pids)
                self._account(datetime.now(UTC) - timedelta(seconds=ACCOUNT_AFTER_S))
                while printed < sampled and self._printable(printed + 1):
                    printed += 1
                    write("")
                    write(self.intervals[printed].block())
                progress.update(f"{now - self.started:,.0f}/{self.soak.seconds:g} s, "
                                f"{self.offering.sent:,} crossings offered, {printed}/"
                                f"{self.count} intervals printed")  # fmt: skip
                nxt = self._due(sampled + 1) if sampled < self.count else now + TICK_S
                time.sleep(max(0.0, min(TICK_S, nxt - time.monotonic())))
        finally:
            self.offering.stop()

    def _due(self, k: int) -> float:
        return self.started + min(k * self.soak.interval_s, self.soak.seconds)

    def _printable(self, k: int) -> bool:
        """Every crossing of interval ``k`` accounted; the last waits for its commands."""
        if k < self.count:
            return time.monotonic() >= self._due(k) + ACCOUNT_AFTER_S
        rest = self.offering.take()
        if rest:
            step_settle(self.fleet, self.devices, rest, self.plan.settle_s)
        self._batch_account(rest)
        return True

    def _sample(self, interval: Interval, meter: CpuMeter) -> None:
        if interval.index == self.count:
            self.offering.join()
            self.offering.check()
        interval.cpu = meter.percent()
        interval.rss = rss_sample(self.pids)
        interval.backlog = queue_backlog(STAGES)
        interval.tables = tables_sample(self.tables)
        interval.t_s = time.monotonic() - self.started
        interval.seconds = interval.t_s - self.intervals[interval.index - 1].t_s
        _seen_forget(self.simulator)
        vacuum_when_autovacuum_is_off()

    def _account(self, before: datetime) -> None:
        self._batch_account(self.offering.take(before))

    def _batch_account(self, offered: list[Offered]) -> None:
        """Each crossing into the interval it went out in."""
        by_interval: dict[int, list[Offered]] = {}
        for o in offered:
            k = int((o.ts - self.wall).total_seconds() // self.soak.interval_s) + 1
            by_interval.setdefault(min(self.count, max(1, k)), []).append(o)
        for k, batch in by_interval.items():
            step = StepResult(k, self.soak.rate, 0.0, len(batch))
            step_account(step, batch, self.devices, self.simulator.first_seen)
            self.intervals[k].add(step)


def _relays_seen(fleet: BenchFleet) -> None:
    Device.objects.filter(serial_number__in=fleet.relays).update(last_seen_at=datetime.now(UTC))


def _seen_forget(sim: TimedSimulator) -> None:
    """The first-seen times of crossings accounted long ago: an hour's would only grow."""
    cutoff = datetime.now(UTC) - timedelta(seconds=SEEN_KEEP_S)
    for command_id, at in list(sim.first_seen.items()):
        if at < cutoff:
            sim.first_seen.pop(command_id, None)


def _soak_report(
    plan: DistributedPlan, intervals: list[Interval], devices: int, write: Write
) -> None:
    """The run at a glance, the trends and their verdicts, the storage figures, the JSON;
    BenchError when a judged series rises or a crossing was lost."""
    measured = intervals[1:]
    write("\nSoak: per interval (latencies in ms of the crossings accounted in it)")
    write(summary_table(measured))
    trends = trends_fit(soak_series(intervals))
    since = window_start(intervals[0].t_s, intervals[-1].t_s)
    write(f"\nTrends over the fitted window, from {since:,.0f} s to {intervals[-1].t_s:,.0f} s "
          "(least squares; a series fails when slope × window > its tolerance)")  # fmt: skip
    write(trends_table(trends))
    cost = storage_cost(intervals, since, DeviceCommand._meta.db_table, devices)
    rolled = partitions_rolled(intervals)
    write("")
    write(partitions_lines(rolled))
    write(cost.lines())
    rising = [t.name for t in trends if t.failed]
    lost = sum(i.lost for i in measured)
    verdict = "pass" if not rising and not lost else "fail"
    if plan.json_path is not None:
        body: dict[str, Any] = {
            "command": plan.command_line(), "machine": machine_describe(),
            "soak": plan.soak.env() if plan.soak else {}, "window_start_s": round(since, 1),
            "intervals": [i.as_json() for i in intervals], "trends": [t.as_json() for t in trends],
            "storage": cost.as_json(), "lost": lost, "verdict": verdict,
            "partitions": {t: {"created": c, "dropped": d} for t, (c, d) in rolled.items()},
        }  # fmt: skip
        plan.json_path.parent.mkdir(parents=True, exist_ok=True)
        plan.json_path.write_text(json.dumps(body, indent=2, default=str) + "\n")
        write(f"\nJSON: {plan.json_path}")
    if verdict == "fail":
        reasons = ([f"rising: {', '.join(rising)}"] if rising else []) + (
            [f"{lost:,} crossing(s) lost (the intervals' lost column)"] if lost else []
        )
        raise BenchError("soak failed: " + "; ".join(reasons))
    write("\nverdict: pass (no judged series rises beyond its tolerance, no crossing lost)")
