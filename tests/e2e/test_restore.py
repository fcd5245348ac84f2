"""A backup that restores: a running system's database dumped with ``pg_dump -Fc`` while a
command is in flight and a reminder is due in seconds, restored with ``pg_restore`` into a
fresh database, and a new stack started on it with an empty Redis and a fresh MQTT broker
(deploy/RUNBOOK.md, "Backups and restore"). The new stack carries on from SQL alone: the
reminder fires once, the in-flight command ends, and a reading from before the dump,
replayed by its device, makes no second command (the unique keys came back with the rows)."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
import uuid
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit
from zoneinfo import ZoneInfo

import psycopg
import pytest
from django.test.utils import override_settings

from automation.models import AutomationEndpointEvent, DeviceCommand
from automation.states import COMMAND_TERMINAL
from config.celery import STAGE_QUEUES
from config.celery import app as celery_app
from config.env import MqttConfig
from devices.models import BridgeSlot, Telemetry
from devices.mqtt.bridge import MqttBridge
from devtools.runtime import in_process_beat, in_process_worker
from devtools.simulator import DeviceSimulator, SimulatedDevice
from notifications.models import Notification
from notifications.services.contacts import external_contact_create
from reminders.models import UserMessageOccurrence
from reminders.services.user_messages import user_message_create
from scheduler.models import DueWork
from tests.chaos.harness import (
    BIN,
    LOOPBACK_WEBHOOKS,
    Hook,
    Proc,
    Servers,
    Stack,
    webhook_receiver,
)
from tests.devices.factories import FarmKit, make_farm
from tests.e2e.conftest import wait_final
from tests.real_servers import child_database_url, with_path
from tests.waiting import wait_for


def _cannot_run() -> str:
    """Why this machine cannot run the test, decided before any fixture starts a server."""
    from django.conf import settings

    if "postgresql" not in settings.DATABASES["default"]["ENGINE"]:
        return "a pg_dump backup needs PostgreSQL (set DATABASE_URL)"
    binaries = ("pg_dump", "pg_restore", "redis-server", "mosquitto")
    missing = [b for b in binaries if shutil.which(b) is None]
    return f"the restore test runs {', '.join(missing)}, not found on PATH" if missing else ""


CANNOT_RUN = _cannot_run()
pytestmark = [
    pytest.mark.e2e,
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(bool(CANNOT_RUN), reason=CANNOT_RUN),
]

# The old stack waits this long for an ack, so the relay's silence keeps the command in
# flight (dispatched, unacknowledged) until well after the dump; the restored row's
# deadline has passed by the time the new stack runs, and its sweep takes it from there.
OLD_ACK_TIMEOUT_S = 10.0
# The reminder is created just before the dump and is due this long after: after the
# restore, before or about when the new stack is up.
REMINDER_LEAD_S = 15.0
START_TIMEOUT_S = 60.0
RESTORE_BRIDGE_PREFIX = "restore-bridge"
HOT: dict[str, Any] = {"temp": 35.0, "humidity": 50}
RELAY: dict[str, Any] = {"io1": False, "fan": 0, "mode": "auto"}


@dataclass(frozen=True)
class BeforeDump:
    """What the old stack left in the database the dump holds."""

    heat_rule: int  # temp > 30 -> io1 on; its command was applied before the dump
    reading_ts: datetime  # the hot reading that made it
    reading_values: dict[str, Any]
    in_flight: int  # the damp rule's command: dispatched, the relay silent
    in_flight_command_id: str
    reminder_key: str  # the scheduler key of a one-off message due after the dump


@dataclass(frozen=True)
class Restored:
    """The fresh database the dump was restored into, read with plain SQL: the test's own
    connection stays on the test database."""

    name: str
    url: str

    def scalar(self, sql: str, *params: Any) -> Any:
        with psycopg.connect(self.url, autocommit=True) as conn:
            row = conn.execute(sql, params).fetchone()
        return None if row is None else row[0]

    def command_status(self, pk: int) -> str:
        return str(self.scalar(f"SELECT status FROM {_table(DeviceCommand)} WHERE id = %s", pk))

    def commands_of_rule(self, rule_id: int) -> int:
        return int(
            self.scalar(f"SELECT count(*) FROM {_table(DeviceCommand)} WHERE rule_id = %s", rule_id)
        )

    def readings_at(self, device_id: int, ts: datetime) -> int:
        return int(
            self.scalar(
                f"SELECT count(*) FROM {_table(Telemetry)} "
                "WHERE device_id = %s AND message_ts = %s",
                device_id,
                ts,
            )
        )

    def events_pending(self, endpoint_ids: list[int]) -> int:
        return int(
            self.scalar(
                f"SELECT count(*) FROM {_table(AutomationEndpointEvent)} "
                "WHERE device_instance_endpoint_id = ANY(%s) AND processing_status = 'pending'",
                endpoint_ids,
            )
        )

    def due_work_status(self, key: str) -> str:
        return str(
            self.scalar(f"SELECT status FROM {_table(DueWork)} WHERE scheduler_key = %s", key)
        )

    def notifications(self, key: str, status: str | None = None) -> int:
        sql = f"SELECT count(*) FROM {_table(Notification)} WHERE source_key = %s"
        if status is None:
            return int(self.scalar(sql, key))
        return int(self.scalar(sql + " AND status = %s", key, status))

    def bridge_slots_connected(self, client_ids: list[str]) -> int:
        return int(
            self.scalar(
                f"SELECT count(*) FROM {_table(BridgeSlot)} "
                "WHERE client_id = ANY(%s) AND connected AND holder <> ''",
                client_ids,
            )
        )


def _table(model: Any) -> str:
    return str(model._meta.db_table)


@pytest.fixture
def hook() -> Iterator[Hook]:
    with webhook_receiver() as receiver:
        yield receiver


@contextmanager
def _old_stack(kit: FarmKit, mqtt_config: MqttConfig, client_id: str) -> Iterator[DeviceSimulator]:
    """Worker, beat, bridge and the farm's devices on the test database, as it runs before
    the backup; leaving the block stops them all, as a lost host would."""
    celery_app.control.purge()  # stale messages of earlier runs name rows that are gone
    sim = DeviceSimulator(
        [
            SimulatedDevice(kit.sensor.serial_number, {"temp": 20.0, "humidity": 50}),
            SimulatedDevice(kit.actuator.serial_number, dict(RELAY)),
        ],
        config=mqtt_config,
        client_id=f"sim-{kit.actuator.serial_number}",
    )
    with ExitStack() as stack:
        stack.enter_context(in_process_worker(concurrency=4))
        stack.enter_context(in_process_beat(tick_s=0.05))
        bridge = MqttBridge(config=mqtt_config, client_id=client_id, session_expiry_s=300)
        bridge.start()
        stack.callback(bridge.stop)
        assert bridge.wait_connected(10), "bridge did not connect"
        stack.enter_context(sim)
        yield sim


def _state_build(kit: FarmKit, sim: DeviceSimulator, hook: Hook) -> BeforeDump:
    """An applied command, a command in flight and a reminder due soon, in the old stack."""
    heat = kit.rule(name="heat: relay on")  # temp > 30 -> io1 on
    damp = kit.rule(
        name="damp: fan up",
        trigger_endpoint=kit.humidity,
        threshold_value=80,
        target_endpoint=kit.fan,
        target_value=75,
    )
    sensor, relay = kit.sensor.serial_number, kit.actuator.serial_number
    reading_ts = datetime.now(UTC)
    assert sim.publish_telemetry(sensor, {"temp": HOT["temp"]}, ts=reading_ts)
    reading_values = sim.values_of(sensor)
    (applied,) = wait_final(DeviceCommand.objects.filter(rule=heat))
    assert applied.status == "applied"

    sim.set_offline(relay, 600)  # the relay hears the next request and says nothing
    assert sim.publish_telemetry(sensor, {"humidity": 90}, ts=datetime.now(UTC))
    in_flight = wait_for(
        lambda: DeviceCommand.objects.filter(rule=damp, status="dispatched").first(),
        "the damp rule's command dispatched",
    )

    with override_settings(WEBHOOK_ALLOWED_NETWORKS=(LOOPBACK_WEBHOOKS,)):
        external_contact_create(
            farm_id=kit.farm.pk, name="Ops hook", webhook_url=hook.url, with_webhook_secret=True
        )
    due = (datetime.now(UTC) + timedelta(seconds=REMINDER_LEAD_S)).astimezone(
        ZoneInfo(kit.farm.time_zone)
    )
    message = user_message_create(
        farm_id=kit.farm.pk,
        subject="Feed delivery",
        text="The feed lorry arrives now.",
        channels=["webhook"],
        starts_on=due.date(),
        send_time=due.time().replace(microsecond=0, tzinfo=None),
        recipients_policy="external_contacts",
    )
    (occurrence,) = UserMessageOccurrence.objects.filter(message=message)
    return BeforeDump(
        heat_rule=heat.pk,
        reading_ts=reading_ts,
        reading_values=reading_values,
        in_flight=in_flight.pk,
        in_flight_command_id=in_flight.device_command_id,
        reminder_key=occurrence.scheduler_key,
    )


def _run(*argv: str) -> None:
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, f"{argv[0]} exited {done.returncode}:\n{done.stderr[-3000:]}"


@contextmanager
def _restored_database(dump: Path) -> Iterator[Restored]:
    """A fresh database from template0 (nothing of template1 in the way) holding the dump;
    dropped afterwards, connections and all."""
    configured = urlsplit(os.environ["DATABASE_URL"]).path.lstrip("/")
    name = f"{configured}_restored_{uuid.uuid4().hex[:8]}"
    server = with_path(child_database_url(), "/postgres")
    with psycopg.connect(server, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}" TEMPLATE template0')
    try:
        url = with_path(server, f"/{name}")
        _run("pg_restore", "--no-owner", "--exit-on-error", "--dbname", url, str(dump))
        yield Restored(name, url)
    finally:
        with psycopg.connect(server, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def _new_stack(stack: Stack) -> list[Proc]:
    """The runbook's start after a restore: migrate, sync the beat schedule, then the bridge,
    beat and one worker for every stage queue (the restore is about state, not scaling)."""
    stack.run_once("migrate", "--noinput")
    stack.run_once("sync_beat_schedule")
    celery = str(BIN / "celery")
    worker = stack.define(
        "worker",
        [
            celery, "-A", "config", "worker", "-Q", ",".join(STAGE_QUEUES), "-n", "restore@%h",
            "--pool", "threads", "--concurrency", "8",
            "--without-gossip", "--without-mingle", "--without-heartbeat",
        ],
    )  # fmt: skip
    beat = stack.define(
        "beat",
        [celery, "-A", "config", "beat", "-S", "django_celery_beat.schedulers:DatabaseScheduler",
         "--max-interval", "1"],
    )  # fmt: skip
    bridge = stack.bridge_define()
    procs = [worker, beat, bridge]
    for proc in procs:
        proc.start()
    return procs


def _new_stack_wait_ready(stack: Stack, restored: Restored, worker: Proc) -> None:
    slots = stack.bridge_slot_ids()
    wait_for(
        lambda: restored.bridge_slots_connected(slots) == len(slots),
        f"the new bridge holding its slots:\n{stack.tails()}",
        START_TIMEOUT_S,
    )
    wait_for(
        lambda: worker.log.exists() and b" ready." in worker.log.read_bytes(),
        f"the new worker ready:\n{stack.tails()}",
        START_TIMEOUT_S,
    )


def test_a_dump_restored_into_a_fresh_database_carries_on(
    fast_timers: None,
    mqtt_config: MqttConfig,
    bridge_client_id: str,
    settings: Any,
    hook: Hook,
    tmp_path: Path,
) -> None:
    settings.ACK_TIMEOUT_S = OLD_ACK_TIMEOUT_S
    kit = make_farm(prefix=f"BK{time.monotonic_ns() % 10**8}")
    dump = tmp_path / "farm.dump"
    with _old_stack(kit, mqtt_config, bridge_client_id) as old_devices:
        before = _state_build(kit, old_devices, hook)
        _run("pg_dump", "--format=custom", "--file", str(dump), "--dbname", child_database_url())
    relay = kit.actuator.serial_number
    assert old_devices.applies[(relay, before.in_flight_command_id)] == 0

    with _restored_database(dump) as restored, ExitStack() as running:
        # The dump is what the old stack had: the command in flight, the reminder not yet due.
        assert restored.command_status(before.in_flight) == "dispatched"
        assert restored.due_work_status(before.reminder_key) == "pending"
        assert restored.notifications(before.reminder_key) == 0
        heat_commands = restored.commands_of_rule(before.heat_rule)
        assert heat_commands == 1

        servers = Servers(tmp_path)  # an empty Redis, a broker with no sessions
        servers.start()
        running.callback(servers.stop)
        stack = Stack(
            servers,
            restored.name,
            tmp_path,
            extra_env={"BRIDGE_SLOT_PREFIX": RESTORE_BRIDGE_PREFIX},
        )
        new_devices = DeviceSimulator(
            [
                SimulatedDevice(kit.sensor.serial_number, dict(before.reading_values)),
                SimulatedDevice(relay, {**RELAY, "io1": True}),
            ],
            config=replace(mqtt_config, host="127.0.0.1", port=servers.mqtt_port, embedded=False),
            client_id=f"restore-sim-{relay}",
        )
        new_devices.start()
        running.callback(new_devices.stop)
        worker, *_ = _new_stack(stack)
        running.callback(stack.stop_all)
        _new_stack_wait_ready(stack, restored, worker)

        # The sensor replays its hot reading (same time, same bytes), then sends a new one.
        assert new_devices.publish_telemetry(kit.sensor.serial_number, ts=before.reading_ts)
        marker_ts = datetime.now(UTC)
        assert new_devices.publish_telemetry(
            kit.sensor.serial_number, {"temp": 20.0, "humidity": 50}, ts=marker_ts
        )
        sensor_endpoints = [kit.temp.pk, kit.humidity.pk]
        wait_for(
            lambda: (
                restored.readings_at(kit.sensor.pk, marker_ts) == 1
                and restored.events_pending(sensor_endpoints) == 0
            ),
            f"the new reading stored and evaluated:\n{stack.tails()}",
        )

        wait_for(
            lambda: restored.command_status(before.in_flight) in COMMAND_TERMINAL,
            f"the in-flight command final:\n{stack.tails()}",
        )
        wait_for(
            lambda: restored.notifications(before.reminder_key, "sent") == 1,
            f"the reminder sent:\n{stack.tails()}",
            REMINDER_LEAD_S + START_TIMEOUT_S,
        )
        assert restored.due_work_status(before.reminder_key) == "completed"
        assert stack.dead() == [], stack.tails()

        # The relay, silent before the dump, got the same commandId again and applied it once.
        assert restored.command_status(before.in_flight) == "applied"
        assert new_devices.applies[(relay, before.in_flight_command_id)] == 1
        # The replayed reading is the row it was before the dump: no new event, no command.
        assert restored.readings_at(kit.sensor.pk, before.reading_ts) == 1
        assert restored.commands_of_rule(before.heat_rule) == heat_commands
        # The reminder fired once: one notification row by its key, one webhook POST.
        assert restored.notifications(before.reminder_key) == 1
        assert sum(hook.posts.values()) == 1 and set(hook.posts.values()) == {1}
