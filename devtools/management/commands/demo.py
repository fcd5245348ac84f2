"""`make demo`: the whole command path on one machine — broker, bridge, in-process worker
and beat, and a device simulator with faults — ending in a table and invariant checks.
Exit status 0 only when every invariant holds."""

from __future__ import annotations

import statistics
import sys
import time
from collections import Counter
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db.models import Count

from automation.models import (
    AutomationEndpointEvent,
    AutomationRuleExecution,
    DeviceCommand,
)
from automation.services.manual import endpoint_command_manual, endpoint_hold_cancel
from automation.states import (
    COMMAND_LIVE,
    CommandOrigin,
    CommandStatus,
    EventStatus,
    ExecutionOutcome,
)
from config.tables import format_table
from devices.mqtt.bridge import MqttBridge
from devtools.demo import DEMO_FAULTS, demo_endpoint, schedule_demo_occurrence, seed_demo_farm
from devtools.demo_lanes import (
    LaneSummary,
    lanes_summary,
    message_delivered,
    message_demo_create,
    storm_rule_ensure,
)
from devtools.demo_rollouts import rollouts_demo, rollouts_summary
from devtools.demo_safety import (
    HEATER,
    WATCHDOG_S,
    safety_alarm_cleared,
    safety_cold_then_silent,
    safety_devices,
    safety_heater_safe,
    safety_seed,
    safety_sensor_back,
    safety_summary,
    safety_wait,
)
from devtools.embedded_broker import ensure_embedded_broker
from devtools.runtime import in_process_beat, in_process_worker
from devtools.simulator import DeviceSimulator, SimulatedDevice
from reminders.models import UserMessage

# Sensor readings that cross the rules' thresholds back and forth.
TEMPERATURES = (24.0, 32.5, 33.0, 16.0, 15.5, 34.0, 24.0)
SCHEDULE_LEAD_S = 2.0  # the scheduled rule fires this long after the readings settled
NEXT_STEP = "Look at this data in the admin: make admin"


class Command(BaseCommand):
    help = "Run telemetry → rules → MQTT RPC → applied on the embedded default; print a summary."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--pairs", type=int, default=len(DEMO_FAULTS))
        parser.add_argument("--timeout", type=float, default=120.0)
        parser.add_argument(
            "--real-timers",
            action="store_true",
            help="keep configured timeouts/backoffs (default: demo-short ones)",
        )

    def handle(self, *args: Any, **opts: Any) -> None:
        if not opts["real_timers"]:
            _shorten_timers()
        ensure_embedded_broker()
        settings.EMAIL_BACKEND = "django.core.mail.backends.locmem.EmailBackend"  # no real inbox
        pairs = seed_demo_farm(opts["pairs"])
        storm = storm_rule_ensure(pairs[0][0], pairs[0][1])
        _earlier_hold_cancel(pairs[0][1])
        safety = safety_seed(demo_endpoint(pairs[0][1], "io1").device.farm)
        since = datetime.now(UTC)
        devices = [SimulatedDevice(s, {"temp": 24.0, "humidity": 50}) for s, _, _ in pairs]
        devices += [SimulatedDevice(r, {"io1": False, "fan": 0}, **fault) for _, r, fault in pairs]
        devices += safety_devices()
        sim = DeviceSimulator(devices, client_id=f"demo-sim-{int(time.time())}")
        bridge = MqttBridge()
        with in_process_worker(), in_process_beat(tick_s=0.1):
            bridge.start()
            sim.start()
            try:
                if not bridge.wait_connected(15):
                    raise CommandError("the bridge could not connect to the MQTT broker")
                for serial in sim.serials:  # every device reports in: online, known state
                    sim.publish_telemetry(serial, ts=since - timedelta(seconds=1))
                self._wait_quiet(since, 60, settle_only=True)
                # The greenhouse sensor reports cold once, then falls silent for good.
                silent_from = safety_cold_then_silent(sim)
                self._feed(sim, [s for s, _, _ in pairs], since)
                self._wait_quiet(since, opts["timeout"])
                safety_wait(
                    f"the silent sensor's heater is off (watchdog {WATCHDOG_S} s)",
                    lambda: safety_heater_safe(safety, silent_from),
                    opts["timeout"],
                    self._progress,
                )
                lanes = self._scheduled(pairs[0][1], since, opts["timeout"])
                self._wait_quiet(since, opts["timeout"])
                self._manual(sim, pairs[0][1])
                self._wait_quiet(since, opts["timeout"])
                runs = rollouts_demo(
                    sim,
                    [(r, f) for _, r, f in pairs],
                    held=pairs[0][1],
                    timeout_s=opts["timeout"],
                    progress=self._progress,
                )
                self._wait_quiet(since, opts["timeout"])
                safety_sensor_back(sim)
                safety_wait(
                    "the sensor is back and its alarm cleared",
                    lambda: safety_alarm_cleared(safety, silent_from),
                    opts["timeout"],
                    self._progress,
                )
            finally:
                sim.stop()
                bridge.stop()
        main, rollouts = lanes_summary(since, storm, *lanes), rollouts_summary(*runs)
        safety_tables, safety_checks = safety_summary(safety, since, silent_from)
        lanes_all = LaneSummary(
            main.tables + rollouts.tables + safety_tables,
            main.checks + rollouts.checks + safety_checks,
        )
        holds = self._summary(since, sim, pairs, lanes_all)
        # Its rows stay in the database, an invariant broken or not: the next step reads them.
        self.stdout.write(f"\n{NEXT_STEP}")
        if not holds:
            raise CommandError("an invariant does not hold (see above)")

    def _feed(self, sim: DeviceSimulator, sensors: list[str], since: datetime) -> None:
        for step, temp in enumerate(TEMPERATURES):
            ts = since + timedelta(seconds=step)
            for serial in sensors:
                sim.publish_telemetry(serial, {"temp": temp}, ts=ts)
                sim.publish_telemetry(serial, {"temp": temp}, ts=ts)  # a duplicate delivery
            self._wait_quiet(since, 60, settle_only=True)

    def _scheduled(
        self, relay: str, since: datetime, timeout_s: float
    ) -> tuple[UserMessage, list[int]]:
        """A schedule-only rule on the first relay fires a moment later (its occurrence is a
        scheduler row the worker claims when due): a command of origin ``schedule``. A message
        to the farm's members goes out at the same local time, through its own scheduler row
        and the notification pipeline. The message and the rule's occurrence rows."""
        rule, at = schedule_demo_occurrence(relay, lead_s=SCHEDULE_LEAD_S)
        message = message_demo_create(relay, at)
        deadline = time.monotonic() + timeout_s
        decided = AutomationRuleExecution.objects.filter(
            rule=rule, occurrence__scheduled_on=at, created_at__gte=since
        )
        while not (decided.exists() and message_delivered(message)):
            if time.monotonic() > deadline:
                raise CommandError(
                    f"the scheduled occurrence or message did not run within {timeout_s:.0f}s"
                )
            self._progress(f"waiting for the scheduled rule and message at {at:%H:%M:%S} UTC")
            time.sleep(0.25)
        return message, sorted({d.occurrence_id for d in decided if d.occurrence_id})

    def _manual(self, sim: DeviceSimulator, relay: str) -> None:
        """An operator flips the first relay by hand: the same gates, serialisation and
        evidence as a rule's command, and a hold that keeps the rules off it for a while."""
        operator, _ = get_user_model()._default_manager.get_or_create(username="demo-operator")
        endpoint = demo_endpoint(relay, "io1")
        endpoint_command_manual(
            endpoint_id=endpoint.pk,
            value=not sim.values_of(relay)["io1"],
            actor=operator,
            reason="demo: checking the vent by hand",
        )

    def _wait_quiet(self, since: datetime, timeout_s: float, *, settle_only: bool = False) -> None:
        """Until no event is pending and every command of this run is final (or, with
        ``settle_only``, none is still waiting to be dispatched)."""
        deadline = time.monotonic() + timeout_s
        waiting = {CommandStatus.PENDING_DISPATCH} if settle_only else COMMAND_LIVE
        time.sleep(0.3)
        while time.monotonic() < deadline:
            events = AutomationEndpointEvent.objects.filter(created_at__gte=since)
            pending = events.filter(processing_status=EventStatus.PENDING).count()
            by_status = Counter(
                dict(
                    DeviceCommand.objects.filter(created_at__gte=since)
                    .values_list("status")
                    .annotate(n=Count("pk"))
                )
            )
            live = sum(n for status, n in by_status.items() if status in waiting)
            line = ", ".join(f"{k} {v}" for k, v in sorted(by_status.items()))
            self._progress(
                f"events {events.count():4d} (pending {pending})  commands: {line or 'none yet'}"
            )
            if not pending and not live:
                return
            time.sleep(0.25)
        raise CommandError(f"the pipeline did not settle within {timeout_s:.0f}s")

    def _progress(self, line: str) -> None:
        """Rewrite one line on a terminal; print only changes when piped to a file."""
        if sys.stderr.isatty():
            sys.stderr.write("\r  " + line.ljust(110))
        elif line != getattr(self, "_last_line", None):
            sys.stderr.write("  " + line + "\n")
        self._last_line = line

    def _summary(
        self,
        since: datetime,
        sim: DeviceSimulator,
        pairs: list[Any],
        lanes: LaneSummary,
    ) -> bool:
        if sys.stderr.isatty():
            sys.stderr.write("\n")
        # The rollouts' commands and the greenhouse heater's have tables of their own.
        everything = DeviceCommand.objects.filter(created_at__gte=since)
        commands = list(
            everything.exclude(origin=CommandOrigin.ROLLOUT).exclude(target_serial_number=HEATER)
        )
        by_state = Counter((i.status, i.status_reason) for i in commands)
        relay_fault = {r: _fault_name(f) for _, r, f in pairs}
        faults: dict[str, Counter[str]] = {name: Counter() for name in relay_fault.values()}
        for i in commands:
            faults[relay_fault[i.target_serial_number]][i.status] += 1
        held = Counter(
            relay_fault[serial]
            for serial in AutomationRuleExecution.objects.filter(
                created_at__gte=since, outcome=ExecutionOutcome.SUPPRESSED
            ).values_list("rule__target_endpoint__device__serial_number", flat=True)
        )
        self.stdout.write(
            "\nCommands by final state (the rollouts' and the heater's are in tables of their own)"
        )
        self.stdout.write(
            format_table(
                ["state", "reason", "commands"],
                [(s, r, n) for (s, r), n in sorted(by_state.items())],
            )
        )
        self.stdout.write(
            "\nCommands by device fault mode (suppressed: decisions a cool-down held)"
        )
        self.stdout.write(
            format_table(
                ["fault mode", "commands", "by final state", "suppressed"],
                [
                    (
                        name,
                        sum(states.values()),
                        ", ".join(f"{s} {n}" for s, n in sorted(states.items())),
                        held[name],
                    )
                    for name, states in sorted(faults.items())
                ],
            )
        )
        origins: dict[str, Counter[str]] = {}
        for i in commands:
            origins.setdefault(i.origin, Counter())[i.status] += 1
        self.stdout.write(
            "\nCommands by origin (manual: asked by an operator, with a reason; "
            "schedule: a rule's local time)"
        )
        self.stdout.write(
            format_table(
                ["origin", "commands", "by final state"],
                [
                    (origin, sum(n.values()), ", ".join(f"{s} {c}" for s, c in sorted(n.items())))
                    for origin, n in sorted(origins.items())
                ],
            )
        )
        self.stdout.write("\nLatency from first publish")
        self.stdout.write(
            format_table(
                ["measure", "commands", "p50 ms", "p99 ms"],
                [
                    _latency("ack", [(i.acknowledged_at, i) for i in commands]),
                    _latency("applied", [(i.applied_at, i) for i in commands]),
                ],
            )
        )
        for title, table in lanes.tables:
            self.stdout.write(f"\n{title}")
            self.stdout.write(table)
        applies = sim.applies
        checks = [
            ("no command applied twice on a device", all(n <= 1 for n in applies.values())),
            ("every command final", not everything.filter(status__in=COMMAND_LIVE).exists()),
            (
                "every applied command has evidence",
                all(
                    i.status_reason in ("state_reported", "telemetry_matched")
                    for i in everything.filter(status=CommandStatus.APPLIED)
                ),
            ),
            (
                "no event left pending",
                not AutomationEndpointEvent.objects.filter(
                    created_at__gte=since, processing_status=EventStatus.PENDING
                ).exists(),
            ),
            ("some commands were applied", any(i.status == "applied" for i in commands)),
            (
                "the manual command was applied",
                any(i.origin == "manual" and i.status == "applied" for i in commands),
            ),
            ("the scheduled command was applied exactly once", _scheduled_once(commands, applies)),
            *lanes.checks,
        ]
        self.stdout.write("\nInvariants")
        self.stdout.write(
            format_table(
                ["invariant", "holds"], [(name, "yes" if ok else "NO") for name, ok in checks]
            )
        )
        self.stdout.write(
            f"\nbroker: {'embedded' if settings.MQTT.embedded else 'MQTT_URL'}, "
            f"database: {settings.DATABASES['default']['ENGINE'].rsplit('.', 1)[-1]}"
            f", Celery broker: {settings.CELERY_BROKER_URL.split('://')[0]}"
        )
        return all(ok for _, ok in checks)


def _earlier_hold_cancel(relay: str) -> None:
    """An earlier run's manual hold (``manual_override_minutes``) would keep this run's rules
    and schedule off the first relay: the run starts from the rules."""
    operator, _ = get_user_model()._default_manager.get_or_create(username="demo-operator")
    endpoint = demo_endpoint(relay, "io1")
    endpoint_hold_cancel(endpoint_id=endpoint.pk, actor=operator, reason="demo: a new run")


def _scheduled_once(commands: list[DeviceCommand], applies: Counter[tuple[str, str]]) -> bool:
    """One command of origin schedule, applied, and applied once by the device."""
    scheduled = [i for i in commands if i.origin == CommandOrigin.SCHEDULE]
    return len(scheduled) == 1 and all(
        i.status == CommandStatus.APPLIED
        and applies[(i.target_serial_number, i.device_command_id or "")] == 1
        for i in scheduled
    )


def _fault_name(options: dict[str, Any]) -> str:
    """``reject:invalid_param``, ``drop_ack×1``: the fault as the relay was configured."""
    name = str(options.get("fault", "none"))
    if options.get("reject_code"):
        name += f":{options['reject_code']}"
    if options.get("fault_times"):
        name += f"×{options['fault_times']}"
    return name


def _latency(name: str, pairs: list[tuple[datetime | None, DeviceCommand]]) -> tuple:
    samples = []
    for at, command in pairs:
        first = command.transitions.filter(to_status="dispatched").order_by("at").first()
        if at is not None and first is not None:
            samples.append((at - first.at).total_seconds() * 1000)
    if not samples:
        return (name, 0, "-", "-")
    samples.sort()
    p99 = samples[min(len(samples) - 1, round(0.99 * (len(samples) - 1)))]
    return (name, len(samples), round(statistics.median(samples), 1), round(p99, 1))


def _shorten_timers() -> None:
    settings.ACK_TIMEOUT_S = 1.5
    settings.RETRY_BACKOFF_S = (0.5, 1.0, 2.0)
    settings.APPLIED_WINDOW_S = 2.0
    settings.COMMAND_SWEEP_INTERVAL_S = 0.25
    settings.DISPATCH_SWEEP_AFTER_S = 2.0
    settings.EVENT_SWEEP_AFTER_S = 5.0
    settings.SCHEDULER_POLL_INTERVAL_S = 0.5
    settings.ROLLOUTS = replace(settings.ROLLOUTS, tick_interval_s=0.25)
    settings.WATCHDOG_SWEEP_INTERVAL_S = 0.5
    settings.DEVICE_HEALTH_SWEEP_INTERVAL_S = 0.5
    settings.ALARMS_NOTIFY_INTERVAL_S = 0.5
