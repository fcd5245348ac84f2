"""Shared fixtures. PostgreSQL-only tests carry the ``postgres`` marker and are skipped, with
the reason printed, when the suite runs on the embedded SQLite default. Tenants: a farm per
organisation and a staff user who is a member of it, for the admin and API tests of every app."""

from __future__ import annotations

import functools
import os
import re
import shutil
import tempfile
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import time_machine
from django.contrib.auth.models import User
from django.db import connection
from django.test import Client

from common.models import MemberRole
from devtools.embedded_broker import LOOPBACK
from devtools.runtime import private_task_queues
from tests.chaos.report import rows_collect, tables_print
from tests.common.factories import OrganizationMemberFactory
from tests.devices.factories import FarmKit, make_farm

if TYPE_CHECKING:
    pass

pytest_plugins = ["tests.mqtt_fixtures", "tests.browser"]


# Under pytest-xdist (``make test`` runs two workers) each worker has its own test database,
# coordination cache (config/settings/test.py), broker key space and MQTT broker
# (``pytest_configure``). What would still collide or starve runs as a unit of work, one
# test after another on one worker (``pytest_xdist_make_scheduler``): the end-to-end tests
# (fixed Redis databases, whole stacks), the chaos tests (stacks on private servers whose
# faults they time), and the other modules that start processes (demo and bench runs on
# Redis databases of their own, entry points, private brokers). Each unit takes a worker of
# its own while there are workers enough, and the single tests fill the rest. xdist's own
# ``xdist_group`` marker is not used: pytest 9 no longer lets it rename node ids.
UNIT_DIRECTORIES = ("e2e", "chaos")  # a unit each, by the directory's name
STARTS_PROCESSES = "starts-processes"
SHARES_SERVERS = re.compile(
    r"pytest\.mark\.(e2e|chaos)\b|\bsubprocess\b|\bPopen\b|\bmultiprocessing\b|"
    r"from tests\.(real_servers|chaos\.harness|devices\.deployed_broker|"
    r"scheduler\.worker_process|config\.entry_points|devtools\.conftest) import"
)
_WORKER_BROKER = pytest.StashKey["PrivateMosquitto"]()


@functools.cache
def module_unit(module: Path) -> str | None:
    """The unit of work the tests of ``module`` belong to (``e2e``, ``chaos`` or
    ``STARTS_PROCESSES``), or None when each of its tests may run anywhere, alone."""
    if module.parent.name in UNIT_DIRECTORIES:
        return module.parent.name
    if module.is_file() and SHARES_SERVERS.search(module.read_text(encoding="utf-8")):
        return STARTS_PROCESSES
    return None


def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """Each test its own unit of work but for the units above. xdist hands the largest
    units out first, so each goes to a worker of its own while there are enough."""
    from xdist.scheduler import LoadScopeScheduling

    root = config.rootpath

    class UnitScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            module = root / nodeid.split("::", 1)[0]
            return module_unit(module) or nodeid

    return UnitScheduling(config, log)


def pytest_configure(config: pytest.Config) -> None:
    """An xdist worker other than the first gets an MQTT broker of its own when the suite
    runs on a real one: a test's topics name serial numbers that another worker's factories
    make too, and a command published there would reach this worker's devices."""
    from django.conf import settings

    from tests.mqtt_fixtures import PrivateMosquitto  # a plugin: imported after registration

    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
    if worker == "gw0" or settings.MQTT.embedded:
        return
    if shutil.which("mosquitto") is None:
        raise pytest.UsageError(f"xdist worker {worker} needs the mosquitto binary")
    workdir = Path(tempfile.mkdtemp(prefix=f"farm-test-mqtt-{worker}-"))
    config.add_cleanup(lambda: shutil.rmtree(workdir, ignore_errors=True))
    broker = PrivateMosquitto(workdir)
    broker.start()
    config.stash[_WORKER_BROKER] = broker
    settings.MQTT = broker.config(settings.MQTT)
    os.environ["MQTT_URL"] = f"mqtt://{LOOPBACK}:{broker.port}"  # the processes it starts


def pytest_unconfigure(config: pytest.Config) -> None:
    broker = config.stash.get(_WORKER_BROKER, None)
    if broker is not None:
        broker.stop()


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    rows_collect(report)


def pytest_terminal_summary(terminalreporter: Any) -> None:
    tables_print(terminalreporter)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    from django.conf import settings

    engine = settings.DATABASES["default"]["ENGINE"]
    if "postgresql" in engine:
        return
    skip = pytest.mark.skip(
        reason="needs PostgreSQL: set DATABASE_URL=postgres://... (see .ci/run)"
    )
    for item in items:
        if "postgres" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session", autouse=True)
def _private_broker_keys() -> Iterator[None]:
    """This run's own key space on a shared broker (see ``private_task_queues``)."""
    with private_task_queues(f"test-{uuid.uuid4().hex[:8]}"):
        yield


# The day the suite's fixed device timestamps ("2026-11-29T11:59:00Z", …) were written for.
FIXTURE_NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)


@pytest.fixture
def clock_at_fixture_dates() -> Iterator[None]:
    """Run on a clock that starts at FIXTURE_NOW and ticks: ingest refuses device time older
    than TELEMETRY_MAX_AGE_S, so a test that uses fixed timestamps must not age with the
    calendar. Opt in with ``pytest.mark.usefixtures("clock_at_fixture_dates")``."""
    with time_machine.travel(FIXTURE_NOW, tick=True):
        yield


@functools.cache
def _migrated_apps() -> Any:
    """The models as the migrations leave them (built once per process)."""
    from django.db.migrations.executor import MigrationExecutor

    return MigrationExecutor(connection).loader.project_state().apps


@pytest.fixture
def staff_groups(db: None) -> None:
    """The staff groups common's migrations make, made again by the same function if a
    transactional test earlier on this worker flushed every table, groups included."""
    from django.contrib.auth.models import Group

    from common.roles import STAFF_GROUPS, staff_groups_sync

    if Group.objects.filter(name__in=list(STAFF_GROUPS)).count() < len(STAFF_GROUPS):
        staff_groups_sync(_migrated_apps())


@pytest.fixture
def on_postgres() -> bool:
    return connection.vendor == "postgresql"


@pytest.fixture(autouse=True)
def _fresh_coordination_cache() -> None:
    """Each test starts with empty coordination keys (Redis outlives test databases)."""
    from django.core.cache import cache

    cache.clear()


@pytest.fixture(autouse=True)
def _no_publisher_left_behind() -> Iterator[None]:
    """A test that dispatched (a task run eagerly) leaves the process's MQTT publisher
    connected, or trying to connect, to the broker of its own settings; the next test on the
    worker would be handed that one, whatever its broker."""
    yield
    from devices.mqtt.publisher import close_publisher

    close_publisher()


@dataclass
class Tenant:
    kit: FarmKit
    user: User


def make_tenant(name: str, *, staff: bool = True, role: str = MemberRole.ADMIN) -> Tenant:
    """An organisation with a farm, and a user who runs it (its admin unless ``role`` says
    otherwise: the role tests name theirs)."""
    kit = make_farm(prefix=name)
    user = User.objects.create_user(username=name, password="pw", is_staff=staff)
    OrganizationMemberFactory(user=user, organization=kit.farm.organization, role=role)
    return Tenant(kit=kit, user=user)


@pytest.fixture
def tenants(db: None) -> tuple[Tenant, Tenant]:
    return make_tenant("alpha"), make_tenant("beta")


@pytest.fixture
def support(client: Client) -> Client:
    """The admin as support sees it: a superuser, logged in."""
    User.objects.create_superuser("support", "s@example.com", "pw")
    client.login(username="support", password="pw")
    return client
