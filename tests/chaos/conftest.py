"""Chaos fixtures: a farm fleet in the test database, private servers, the project's processes
started as an operator starts them, a webhook receiver that counts what reaches it, and a
summary table of every scenario at the end of the run (``tests.chaos.report``)."""

from __future__ import annotations

import contextlib
import shutil
import threading
import time
from collections.abc import Generator, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from django.core.management import call_command
from django.db import DEFAULT_DB_ALIAS, connection
from django.test.utils import override_settings, setup_databases, teardown_databases

from config.celery import app as celery_app
from config.env import MqttConfig
from devices.models import BridgeSlot
from devices.mqtt.client import connect, new_client
from devices.mqtt.contract import telemetry_payload, telemetry_topic
from devtools.runtime import broker_pools_forget
from devtools.simulator import FaultMode
from events.models import EventDeadLetter
from notifications.services.contacts import external_contact_create
from reminders.services.settings import reminder_setting_create
from reminders.services.sources import endpoint_metric_source_create
from tests.chaos.harness import LOOPBACK_WEBHOOKS, Hook, Proc, Servers, Stack, webhook_receiver
from tests.chaos.report import rows_attach
from tests.devices.factories import FarmKit, make_farm
from tests.waiting import wait_for

KITS = 16  # farms: one sensor and one relay (io1, fan, mode) each
# Every simulator fault at once, dealt to the relays in turn.
FAULTS: tuple[str, ...] = (
    FaultMode.NONE,
    f"{FaultMode.DROP_ACK}:1",
    FaultMode.DELAY_ACK,
    FaultMode.DUPLICATE_ACK,
    f"{FaultMode.REJECT}:1",
    FaultMode.NEVER_APPLY,
    FaultMode.WRONG_VALUE,
    f"{FaultMode.OFFLINE}:1",
)

HIGH: dict[str, Any] = {"io1": True, "fan": 75, "mode": "manual"}
LOW: dict[str, Any] = {"io1": False, "fan": 0, "mode": "auto"}
START_TIMEOUT_S = 60.0


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """A scenario's table rows leave with its report (``tests.chaos.report``)."""
    report = yield
    if report.when == "call":
        rows_attach(report)
    return report


@pytest.fixture
def hook() -> Iterator[Hook]:
    with webhook_receiver() as receiver:
        yield receiver


class Sensors:
    """The sensors' side, published with QoS 1 and confirmed by the broker (retried while
    it is down), so every reading counted here really reached the broker."""

    def __init__(self, port: int) -> None:
        configured: MqttConfig = settings.MQTT
        self._config = replace(configured, host="127.0.0.1", port=port, embedded=False)
        self._client = new_client(f"chaos-sensors-{time.monotonic_ns()}", config=self._config)
        connect(self._client, config=self._config, attempts=20, max_backoff_s=1.0)
        self._client.loop_start()
        self.published = 0
        self._clock = datetime.now(UTC)
        self._gate = threading.Lock()

    @contextmanager
    def held(self) -> Iterator[None]:
        """No reading goes out meanwhile; one already on its way is confirmed first."""
        with self._gate:
            yield

    @property
    def clock(self) -> datetime:
        """The timestamp of the latest reading; the next one is later."""
        return self._clock

    def reading(self, serial: str, temp: float) -> None:
        with self._gate:
            self._reading(serial, temp)

    def _reading(self, serial: str, temp: float) -> None:
        self._clock += timedelta(milliseconds=1)
        payload = telemetry_payload(self._clock, {"temp": temp})
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            # While the broker restarts, paho raises or never confirms: publish again (the
            # same payload, so a copy that got through after all is absorbed by its
            # fingerprint).
            with contextlib.suppress(RuntimeError, ValueError):
                info = self._client.publish(telemetry_topic(serial), payload, qos=1)
                info.wait_for_publish(3)
                if info.is_published():
                    self.published += 1
                    return
            time.sleep(0.2)
        raise AssertionError(f"could not publish a reading of {serial} for 60s")

    def close(self) -> None:
        self._client.disconnect()
        self._client.loop_stop()


@dataclass
class Fleet:
    kits: list[FarmKit]

    @property
    def relays(self) -> list[str]:
        return [k.actuator.serial_number for k in self.kits]


def fleet_create(hook: Hook, stamp: str) -> Fleet:
    """Farms with six rules each (temp > 30 → HIGH, temp < 20 → LOW on three endpoints) and a
    threshold reminder (temp ≥ 30, FalseToTrue) to a webhook contact."""
    kits = [make_farm(prefix=f"CX{stamp}-{n:02d}") for n in range(KITS)]
    for kit in kits:
        for key in HIGH:
            target = getattr(kit, key)
            kit.rule(target_endpoint=target, operator="gt", threshold_value=30,
                     target_value=HIGH[key], name=f"hot {key}")  # fmt: skip
            kit.rule(target_endpoint=target, operator="lt", threshold_value=20,
                     target_value=LOW[key], name=f"cool {key}")  # fmt: skip
        with override_settings(WEBHOOK_ALLOWED_NETWORKS=(LOOPBACK_WEBHOOKS,)):
            external_contact_create(
                farm_id=kit.farm.pk, name="Ops hook", webhook_url=hook.url, with_webhook_secret=True
            )
        reminder_setting_create(
            name="Hot barn",
            farm_id=kit.farm.pk,
            source_type="endpoint_metric",
            trigger_type="threshold_condition",
            threshold_metric="barn_temp",
            threshold_operator="gte",
            threshold_value=Decimal("30"),
            firing_policy="FalseToTrue",
            recipients_policy="external_contacts",
            template_name="endpoint_threshold",
            channels=["webhook"],
        )
        endpoint_metric_source_create(
            farm_id=kit.farm.pk, endpoint_id=kit.temp.pk, metric_key="barn_temp",
            aggregate="latest",
        )  # fmt: skip
    return Fleet(kits)


@contextmanager
def celery_broker(url: str) -> Iterator[None]:
    """Point this process's Celery producer at ``url`` (the private broker the stack's
    workers read), so tasks and events the test's own writes enqueue reach them."""
    conf = celery_app.conf
    saved = conf.broker_url, conf.broker_transport_options
    broker_pools_forget()
    conf.broker_url, conf.broker_transport_options = url, {}
    try:
        yield
    finally:
        broker_pools_forget()
        conf.broker_url, conf.broker_transport_options = saved


@dataclass
class Chaos:
    servers: Servers
    stack: Stack
    fleet: Fleet
    sensors: Sensors
    hook: Hook
    counters_path: Path
    dead_letters_before: int
    # (stopped, back) of each broker outage a scenario staged, for its oracle.
    outages: list[tuple[datetime, datetime]] = field(default_factory=list)


def _binaries_missing() -> list[str]:
    return [b for b in ("redis-server", "mosquitto") if shutil.which(b) is None]


def _log_has(proc: Proc, marker: bytes, times: int = 1) -> bool:
    return proc.log.exists() and proc.log.read_bytes().count(marker) >= times


def _stack_wait_ready(stack: Stack) -> None:
    slot_ids = stack.bridge_slot_ids()

    def bridges_up() -> bool:
        held = BridgeSlot.objects.filter(client_id__in=slot_ids, connected=True).exclude(holder="")
        return held.count() == len(slot_ids)

    wait_for(bridges_up, "every bridge slot held by a connected bridge", START_TIMEOUT_S)
    for proc in stack.procs.values():
        if proc.name.startswith("worker-"):
            wait_for(lambda p=proc: _log_has(p, b" ready."), proc.name, START_TIMEOUT_S)


@contextmanager
def _test_database() -> Iterator[None]:
    """The test database, also when only chaos tests were selected: pytest-django creates it
    only for tests marked django_db, and the stack must never run on (and flush) the
    configured database."""
    test_name = connection.settings_dict.get("TEST", {}).get("NAME")
    if connection.settings_dict["NAME"] == test_name:
        yield
        return
    config = setup_databases(verbosity=0, interactive=False, aliases={DEFAULT_DB_ALIAS})
    try:
        yield
    finally:
        teardown_databases(config, verbosity=0)


@pytest.fixture(scope="module")
def chaos_stack(
    django_db_setup: None, django_db_blocker: Any, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Stack]:
    """Servers, bridge, workers and beat, started once for every scenario of the module
    (each scenario brings its own farms and simulator); the database is flushed after."""
    with stack_running(django_db_blocker, tmp_path_factory) as stack:
        yield stack


@contextmanager
def stack_running(
    django_db_blocker: Any,
    tmp_path_factory: pytest.TempPathFactory,
    extra_env: dict[str, str] | None = None,
) -> Iterator[Stack]:
    """The body of ``chaos_stack``, for a module whose stack needs settings of its own
    (``extra_env``, on top of the harness's FAST_TIMERS) in every process, beat included."""
    with django_db_blocker.unblock():
        if connection.vendor != "postgresql":
            pytest.skip("chaos runs the real processes against PostgreSQL (see .ci/run)")
        missing = _binaries_missing()
        if missing:
            pytest.skip(f"chaos starts private servers and needs: {', '.join(missing)}")
        with _test_database():
            workdir = tmp_path_factory.mktemp("chaos")
            servers = Servers(workdir)
            servers.start()
            try:
                with celery_broker(servers.broker_url):
                    stack = Stack(
                        servers, connection.settings_dict["NAME"], workdir,
                        extra_env=dict(extra_env or {}),
                    )  # fmt: skip
                    stack.build()
                    stack.run_once("sync_beat_schedule")
                    try:
                        stack.start(*(n for n in stack.procs if n != "beat-2"))
                        _stack_wait_ready(stack)
                        yield stack
                    finally:
                        stack.stop_all()
            finally:
                servers.stop()
                call_command("flush", interactive=False, verbosity=0)


@pytest.fixture
def chaos(
    chaos_stack: Stack, django_db_blocker: Any, hook: Hook, tmp_path: Path
) -> Iterator[Chaos]:
    """A fresh fleet and its simulator process on the running stack; afterwards the stack
    is put back as it was (the second beat stopped, anything a scenario left down started)."""
    stack = chaos_stack
    with django_db_blocker.unblock():
        fleet = fleet_create(hook, f"{time.monotonic_ns() % 10**6}")
        counters = tmp_path / "simulator-counters.json"
        simulator = stack.simulator_define(_simulator_args(fleet, counters), tmp_path)
        simulator.start()
        sensors = Sensors(stack.servers.mqtt_port)
        try:
            wait_for(lambda: _log_has(simulator, b"devices on"), "simulator", START_TIMEOUT_S)
            yield Chaos(
                stack.servers,
                stack,
                fleet,
                sensors,
                hook,
                counters,
                EventDeadLetter.objects.count(),
            )
        finally:
            sensors.close()
            simulator.stop()
            stack.procs["beat-2"].stop()
            for proc in stack.procs.values():
                if proc.name not in ("simulator", "beat-2") and not proc.alive:
                    proc.start()


def _simulator_args(fleet: Fleet, counters: Path) -> list[str]:
    args = ["--serials", ",".join(fleet.relays), "--values", '{"io1": false, "fan": 0, '
            '"mode": "auto"}', "--telemetry-interval", "0", "--progress-interval", "1",
            "--offline", "3", "--delay", "0.5", "--counters", str(counters),
            "--client-id", "chaos-simulator"]  # fmt: skip
    for serial, fault in zip(fleet.relays, FAULTS * len(fleet.relays), strict=False):
        args += ["--fault", f"{serial}={fault}"]
    return args
