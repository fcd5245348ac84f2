"""`make demo`: seed one farm, feed simulated telemetry through the ingest stage on the
in-process worker, and print what became of it."""

from __future__ import annotations

import json
import random
import sys
import time
from datetime import UTC, datetime, timedelta
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db.models import Count

from automation.models import (
    AutomationCommandIntent,
    AutomationEndpointEvent,
    AutomationRule,
    AutomationRuleExecution,
)
from automation.states import EventStatus
from config.runtime import in_process_beat, in_process_worker
from config.tables import format_table
from devices.models import (
    Device,
    DeviceInstanceEndpoint,
    DeviceMessageRejection,
    DeviceProfile,
    DeviceProfileEndpoint,
    Farm,
    Organization,
)
from devices.services import InboundTelemetry
from devices.tasks import telemetry_ingest_task

DEMO_ORG = "Demo Co-op"


def seed_demo_farm(pairs: int) -> list[tuple[Device, Device]]:
    """Idempotently create a farm of (sensor, relay) pairs with three rules per pair."""
    org, _ = Organization.objects.get_or_create(name=DEMO_ORG)
    farm, _ = Farm.objects.get_or_create(
        organization=org, name="Demo farm", defaults={"time_zone": "Europe/Berlin"}
    )
    sensor_profile, _ = DeviceProfile.objects.get_or_create(name="Climate sensor v1")
    relay_profile, _ = DeviceProfile.objects.get_or_create(name="Relay box v1")
    temp, _ = DeviceProfileEndpoint.objects.get_or_create(
        profile=sensor_profile, key="temp", defaults={"data_type": "number"}
    )
    humidity, _ = DeviceProfileEndpoint.objects.get_or_create(
        profile=sensor_profile, key="humidity", defaults={"data_type": "number"}
    )
    io1, _ = DeviceProfileEndpoint.objects.get_or_create(
        profile=relay_profile,
        key="io1",
        defaults={
            "data_type": "bool",
            "writable": True,
            "rpc_method": "setIO",
            "rpc_param_key": "io1",
        },
    )
    fan, _ = DeviceProfileEndpoint.objects.get_or_create(
        profile=relay_profile,
        key="fan",
        defaults={
            "data_type": "number",
            "writable": True,
            "min_value": 0,
            "max_value": 100,
            "rpc_method": "setFan",
            "rpc_param_key": "fan",
        },
    )
    out = []
    for i in range(1, pairs + 1):
        sensor, _ = Device.objects.get_or_create(
            serial_number=f"DEMO-S{i:02d}", defaults={"farm": farm, "profile": sensor_profile}
        )
        relay, _ = Device.objects.get_or_create(
            serial_number=f"DEMO-R{i:02d}", defaults={"farm": farm, "profile": relay_profile}
        )
        ep = {
            key: DeviceInstanceEndpoint.objects.get_or_create(device=d, profile_endpoint=p)[0]
            for key, d, p in [
                ("temp", sensor, temp),
                ("humidity", sensor, humidity),
                ("io1", relay, io1),
                ("fan", relay, fan),
            ]
        }
        rules: list[dict[str, Any]] = [
            {
                "name": f"Vent on {i}",
                "trigger_endpoint": ep["temp"],
                "operator": "gt",
                "threshold_value": 30,
                "target_endpoint": ep["io1"],
                "target_value": True,
            },
            {
                "name": f"Vent off {i}",
                "trigger_endpoint": ep["temp"],
                "operator": "lt",
                "threshold_value": 18,
                "target_endpoint": ep["io1"],
                "target_value": False,
            },
            {
                "name": f"Dry air {i}",
                "trigger_endpoint": ep["humidity"],
                "operator": "outside",
                "threshold_value": 30,
                "threshold_value_high": 80,
                "target_endpoint": ep["fan"],
                "target_value": 100,
            },
        ]
        for rule in rules:
            AutomationRule.objects.get_or_create(farm=farm, name=rule.pop("name"), defaults=rule)
        out.append((sensor, relay))
    return out


class Command(BaseCommand):
    help = "Run the pipeline on the embedded default and print a summary table."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--pairs", type=int, default=3)
        parser.add_argument("--messages", type=int, default=300)
        parser.add_argument("--timeout", type=float, default=60.0)

    def handle(self, *args: Any, **opts: Any) -> None:
        pairs = seed_demo_farm(opts["pairs"])
        started = datetime.now(UTC)
        with in_process_worker(), in_process_beat():
            batches = self._feed(pairs, opts["messages"], started)
            self.stdout.write(f"fed {opts['messages']} telemetry messages in {batches} batches")
            self._wait_for_quiet(started, opts["timeout"])
        self._summary(started)

    def _feed(self, pairs: list[tuple[Device, Device]], count: int, start: datetime) -> int:
        rng = random.Random(7)
        temps = {s.serial_number: 24.0 for s, _ in pairs}
        batch: list[list[Any]] = []
        batches = 0
        for n in range(count):
            sensor = pairs[n % len(pairs)][0].serial_number
            temps[sensor] = min(40, max(10, temps[sensor] + rng.uniform(-3, 3)))
            ts = (start + timedelta(seconds=n)).isoformat().replace("+00:00", "Z")
            payload = json.dumps(
                {
                    "ts": ts,
                    "values": {"temp": round(temps[sensor], 1), "humidity": rng.randint(20, 90)},
                }
            )
            if n % 25 == 0:
                payload = payload[:-2]  # a malformed message now and then
            message = InboundTelemetry(sensor, payload, datetime.now(UTC))
            batch.append(message.as_task_arg())
            if n % 10 == 0:
                batch.append(message.as_task_arg())  # and a duplicate delivery
            if len(batch) >= 50:
                telemetry_ingest_task.delay(batch)
                batches, batch = batches + 1, []
        if batch:
            telemetry_ingest_task.delay(batch)
            batches += 1
        return batches

    def _wait_for_quiet(self, since: datetime, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            pending = AutomationEndpointEvent.objects.filter(
                created_at__gte=since, processing_status=EventStatus.PENDING
            ).count()
            total = AutomationEndpointEvent.objects.filter(created_at__gte=since).count()
            sys.stderr.write(f"\revents: {total:5d} persisted, {pending:5d} pending evaluation")
            if total and not pending:
                sys.stderr.write("\n")
                return
            time.sleep(0.2)
        raise CommandError("pipeline did not settle before --timeout")

    def _summary(self, since: datetime) -> None:
        def counts(qs: Any, field: str) -> list[tuple[str, int]]:
            return [
                (row[field], row["n"])
                for row in qs.values(field).annotate(n=Count("pk")).order_by(field)
            ]

        events = AutomationEndpointEvent.objects.filter(created_at__gte=since)
        executions = AutomationRuleExecution.objects.filter(created_at__gte=since)
        intents = AutomationCommandIntent.objects.filter(created_at__gte=since)
        rejections = DeviceMessageRejection.objects.filter(received_at__gte=since)
        rows = (
            [("endpoint event", k, n) for k, n in counts(events, "processing_status")]
            + [("rule execution", k, n) for k, n in counts(executions, "outcome")]
            + [("command intent", k, n) for k, n in counts(intents, "status")]
            + [("rejected telemetry", k, n) for k, n in counts(rejections, "reason_code")]
        )
        self.stdout.write(format_table(["ledger", "state", "rows"], rows))
