"""Shared fixtures. PostgreSQL-only tests carry the ``postgres`` marker and are skipped, with
the reason printed, when the suite runs on the embedded SQLite default. Tenants: a farm per
organisation and a staff user who is a member of it, for the admin and API tests of every app."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime

import pytest
import time_machine
from django.contrib.auth.models import User
from django.db import connection
from django.test import Client

from common.models import MemberRole
from devtools.runtime import private_task_queues
from tests.common.factories import OrganizationMemberFactory
from tests.devices.factories import FarmKit, make_farm

pytest_plugins = ["tests.mqtt_fixtures", "tests.browser"]


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


@pytest.fixture
def on_postgres() -> bool:
    return connection.vendor == "postgresql"


@pytest.fixture(autouse=True)
def _fresh_coordination_cache() -> None:
    """Each test starts with empty coordination keys (Redis outlives test databases)."""
    from django.core.cache import cache

    cache.clear()


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
