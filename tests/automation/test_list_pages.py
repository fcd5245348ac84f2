"""The lists that grow with every reading (``/commands/``, ``/executions/``, ``/scheduler/``)
page newest first by an opaque cursor (``common.pagination.NewestFirstCursor``): no
``COUNT(*)``, a page in the same number of statements whatever the page and the table's size,
every row once when following ``next``, filters kept in the links. On PostgreSQL a year of
commands (200,000 rows) is paged by an index scan, never a sequential scan of the table."""

from __future__ import annotations

import sys
from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from rest_framework.test import APIClient

from automation.api import CommandViewSet, RuleExecutionViewSet, SchedulerViewSet
from automation.models import AutomationRuleExecution, DeviceCommand
from automation.states import ExecutionOutcome
from common.pagination import NewestFirstCursor
from tests.automation.factories import relay_command
from tests.common.auth import token_client
from tests.conftest import Tenant
from tests.devices.factories import FarmKit
from tests.scheduler.factories import DueWorkFactory

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("clock_at_fixture_dates")]
LISTS = ("commands", "executions", "scheduler")
COMMANDS_TABLE = DeviceCommand._meta.db_table
YEAR_OF_COMMANDS = 200_000
# A page: the token (one SELECT), the caller's organisations (once for the role check, once
# for the rows' scope) and the page's SELECT. No COUNT, whatever the table holds.
PAGE_STATEMENTS = 4


def _command(kit: FarmKit, status: str = "applied") -> DeviceCommand:
    return relay_command(kit, at=timezone.now(), status=status)


def _execution(kit: FarmKit) -> AutomationRuleExecution:
    """A scheduled rule's decision: an execution and its scheduler row, both listed."""
    return AutomationRuleExecution.objects.create(
        occurrence=DueWorkFactory(farm=kit.farm),
        rule=kit.rule(),
        target_endpoint=kit.io1,
        outcome=ExecutionOutcome.SKIPPED,
        created_at=timezone.now(),
    )


def _seed(t: Tenant, rows: int) -> dict[str, list[int]]:
    """``rows`` of each list for the tenant, newest (highest id) first."""
    commands = [_command(t.kit).pk for _ in range(rows)]
    executions = [_execution(t.kit) for _ in range(rows)]
    return {
        "commands": sorted(commands, reverse=True),
        "executions": sorted((e.pk for e in executions), reverse=True),
        "scheduler": sorted((e.occurrence_id or 0 for e in executions), reverse=True),
    }


def _client(t: Tenant) -> APIClient:
    """A member's client whose token has been used once: its first use is recorded (an
    UPDATE, once per ``LAST_USED_RESOLUTION_S``), which is not the page's cost."""
    client = token_client(t.user)
    assert client.get("/api/v1/").status_code == 200
    return client


def _page(client: APIClient, url: str, params: dict[str, Any] | None = None) -> tuple[Any, int]:
    """The page's body and its statement count; a page never counts the list."""
    with CaptureQueriesContext(connection) as captured:
        response = client.get(url, params)
    assert response.status_code == 200, response.content
    assert not [q["sql"] for q in captured if "COUNT(" in q["sql"].upper()]
    return response.json(), len(captured)


def _walk(client: APIClient, url: str, params: dict[str, Any]) -> tuple[list[int], set[int]]:
    """Every id listed when following ``next`` from the first page, and the statement counts
    of the pages."""
    body, statements = _page(client, url, params)
    assert set(body) == {"next", "previous", "results"} and body["previous"] is None
    ids, counts = [r["id"] for r in body["results"]], {statements}
    while body["next"]:
        body, statements = _page(client, body["next"])
        ids += [r["id"] for r in body["results"]]
        counts.add(statements)
    return ids, counts


def test_each_list_pages_newest_first_by_cursor_in_a_fixed_number_of_statements(
    tenants: tuple[Tenant, Tenant],
) -> None:
    alpha, beta = tenants
    mine = _seed(alpha, 5)
    _seed(beta, 2)  # another organisation's rows are never listed
    client = _client(alpha)
    for name in LISTS:
        ids, counts = _walk(client, f"/api/v1/{name}/", {"page_size": 2})
        assert ids == mine[name], name
        assert counts == {PAGE_STATEMENTS}, (name, counts)
    # Back from the second page to the first.
    first, _ = _page(client, "/api/v1/commands/", {"page_size": 2})
    second, _ = _page(client, first["next"])
    back, _ = _page(client, second["previous"])
    assert [r["id"] for r in back["results"]] == mine["commands"][:2]


def test_filters_are_kept_by_the_cursor(tenants: tuple[Tenant, Tenant]) -> None:
    alpha, _ = tenants
    failed = sorted((_command(alpha.kit, "failed").pk for _ in range(5)), reverse=True)
    for _ in range(4):
        _command(alpha.kit)
    client = _client(alpha)
    ids, _ = _walk(client, "/api/v1/commands/", {"status": "failed", "page_size": 2})
    assert ids == failed
    execution = _execution(alpha.kit)
    _execution(alpha.kit)
    rule_ids, _ = _walk(client, "/api/v1/executions/", {"rule": execution.rule_id})
    assert rule_ids == [execution.pk]
    assert client.get("/api/v1/commands/", {"cursor": "not-a-cursor"}).status_code == 404


def test_each_list_is_ordered_as_its_cursor() -> None:
    """The viewset's own ordering is the cursor's, so a page and a retrieve agree."""
    for view in (CommandViewSet, RuleExecutionViewSet, SchedulerViewSet):
        assert view.pagination_class is NewestFirstCursor
        assert view().scoped(None).query.order_by == (NewestFirstCursor.ordering,)


def _year_of_commands(alpha: FarmKit, beta: FarmKit) -> None:
    """200,000 applied commands over a year (one every 158 s), alternating between the two
    organisations' relays: one INSERT ... SELECT, then ANALYZE as autovacuum would."""
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {COMMANDS_TABLE} (origin, request_reason, target_device_id, "
            "target_device_endpoint_id, target_serial_number, command_method, command_params, "
            "target_value, idempotency_key, desired_state_fingerprint, status, status_reason, "
            "attempt_count, max_attempts, last_error, mqtt_request_id, version, created_at, "
            "updated_at, applied_at, finished_at) "
            "SELECT 'manual', '', CASE WHEN i %% 2 = 0 THEN %s ELSE %s END, "
            "CASE WHEN i %% 2 = 0 THEN %s ELSE %s END, CASE WHEN i %% 2 = 0 THEN %s ELSE %s END, "
            "'setIO', '{\"io1\": true}', 'true', md5('year' || i), md5(i::text), 'applied', "
            "'', 1, 3, '', '', 3, at, at, at, at "
            "FROM (SELECT i, now() - (%s - i) * interval '158 s' AS at "
            "FROM generate_series(1, %s) AS i) AS seeded",
            [
                alpha.actuator.pk,
                beta.actuator.pk,
                alpha.io1.pk,
                beta.io1.pk,
                alpha.actuator.serial_number,
                beta.actuator.serial_number,
                YEAR_OF_COMMANDS,
                YEAR_OF_COMMANDS,
            ],
        )
        cursor.execute(f"ANALYZE {COMMANDS_TABLE}")


def _page_select(captured: CaptureQueriesContext) -> str:
    [sql] = [
        q["sql"]
        for q in captured.captured_queries
        if f'FROM "{COMMANDS_TABLE}"' in q["sql"] and "LIMIT" in q["sql"]
    ]
    return sql


@pytest.mark.postgres
def test_a_year_of_commands_is_paged_by_an_index_scan(tenants: tuple[Tenant, Tenant]) -> None:
    alpha, beta = tenants
    _year_of_commands(alpha.kit, beta.kit)
    client = _client(alpha)
    with CaptureQueriesContext(connection) as first_page:
        first = client.get("/api/v1/commands/")
    assert first.status_code == 200
    with CaptureQueriesContext(connection) as second_page:
        second = client.get(first.json()["next"])
    assert second.status_code == 200
    for captured in (first_page, second_page):
        assert len(captured) == PAGE_STATEMENTS
        assert not [q["sql"] for q in captured if "COUNT(" in q["sql"].upper()]
    newest = [r["id"] for r in first.json()["results"] + second.json()["results"]]
    assert len(newest) == 100 and newest == sorted(set(newest), reverse=True)
    assert {r["target_device"] for r in first.json()["results"]} == {alpha.kit.actuator.pk}
    for captured in (first_page, second_page):
        with connection.cursor() as cursor:
            cursor.execute("EXPLAIN " + _page_select(captured))
            plan = [row[0] for row in cursor.fetchall()]
        print(f"\n{YEAR_OF_COMMANDS:,} commands, a page's plan:", *plan, sep="\n", file=sys.stderr)
        assert not [line for line in plan if f"Seq Scan on {COMMANDS_TABLE}" in line], plan
        assert [line for line in plan if f"Index Scan Backward using {COMMANDS_TABLE}" in line]
