"""Property-based API check: schemathesis loads the OpenAPI schema from the Django app (WSGI,
no server) and sends generated requests to every operation as a member of an organisation
with data; no request may end in a server error (5xx)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import date
from datetime import time as local_time

import pytest
import schemathesis
from django.core.signals import request_finished, request_started
from django.db import close_old_connections
from django.test import override_settings
from hypothesis import HealthCheck, given, settings
from schemathesis import APIOperation, Case
from schemathesis.checks import not_a_server_error

from common.models import MemberRole, OrganizationMember
from config.wsgi import application
from reminders.services.user_messages import user_message_create
from tests.automation.conftest import dispatch, make_intent
from tests.common.auth import api_key
from tests.conftest import Tenant

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("clock_at_fixture_dates")]
EXAMPLES_PER_OPERATION = 15


@pytest.fixture
def wsgi_keeps_test_connection() -> Iterator[None]:
    """Requests through the bare WSGI app would close the test's database connection when
    they finish (as Django's test client prevents); keep it open for the test's transaction."""
    request_started.disconnect(close_old_connections)
    request_finished.disconnect(close_old_connections)
    try:
        yield
    finally:
        request_started.connect(close_old_connections)
        request_finished.connect(close_old_connections)


def _check(operation: APIOperation, headers: dict[str, str]) -> None:
    """Send a bounded number of generated requests to one operation; raise on a 5xx."""

    @settings(
        max_examples=EXAMPLES_PER_OPERATION,
        deadline=None,
        database=None,
        derandomize=True,
        suppress_health_check=list(HealthCheck),
    )
    @given(case=operation.as_strategy())
    def run(case: Case) -> None:
        case.call_and_validate(headers=headers, checks=[not_a_server_error])

    run()


def test_no_operation_answers_with_a_server_error(
    tenants: tuple[Tenant, Tenant], wsgi_keeps_test_connection: None
) -> None:
    alpha, _ = tenants
    alpha.kit.rule()
    dispatch(make_intent(alpha.kit))  # a rule, an execution and a sent command to look up
    user_message_create(  # a scheduled message to read, patch and cancel
        farm_id=alpha.kit.farm.pk,
        subject="Shearing",
        text="Shearers arrive at 7.",
        channels=["email"],
        recurrence="daily",
        starts_on=date(2026, 12, 1),
        send_time=local_time(6, 0),
        count=5,
    )
    # An admin, so the writes (farms, profiles, devices, members) run past the role check;
    # device logins go to an in-memory stand-in for the broker.
    OrganizationMember.objects.filter(user=alpha.user).update(role=MemberRole.ADMIN)
    broker = override_settings(
        DEVICE_CREDENTIALS_BACKEND="tests.devices.fake_credentials.FakeBackend"
    )
    headers = {"Authorization": f"Token {api_key(alpha.user)}"}
    schema = schemathesis.openapi.from_wsgi("/api/schema/", application)
    operations = [result.ok() for result in schema.get_all_operations()]
    assert operations, "the schema lists no operations"
    # Rotating the token ends the headers' key: that operation goes last.
    operations.sort(key=lambda operation: operation.path.endswith("/token/rotate/"))
    started = time.monotonic()
    failures: list[str] = []
    with broker:
        for operation in operations:
            try:
                _check(operation, headers)
            except Exception as error:  # every failing operation is reported, not the first
                failures.append(f"{operation.label}: {error}")
    elapsed = time.monotonic() - started
    assert not failures, "\n\n".join(failures)
    # A figure, not an assertion: the time moves with the machine's load (two test workers).
    print(f"{len(operations)} operations x {EXAMPLES_PER_OPERATION} examples: {elapsed:.1f}s")
