"""The hot path's SQL runner: it shares Django's connection and transaction, and the
statement counter tells its statements from the ORM's."""

from __future__ import annotations

import pytest
from django.db import connection, transaction

from common.hot_sql import hot_rows, hot_run, in_list, json_param, json_value, statements_counted
from devices.models import Farm
from tests.devices.factories import make_farm

pytestmark = pytest.mark.django_db


def test_a_hot_statement_is_counted_apart_from_the_orm() -> None:
    with statements_counted() as count:
        rows = hot_rows("SELECT 1 + %s", [1])
        Farm.objects.count()
    assert rows == [(2,)]
    assert (len(count.hot), len(count.orm), count.total) == (1, 1, 2)


def test_an_in_list_and_json_round_trip() -> None:
    kit = make_farm(prefix="hs")
    sql, params = in_list([kit.farm.pk, -1])
    assert hot_rows(f"SELECT count(*) FROM devices_farm WHERE id IN {sql}", params) == [(1,)]
    assert json_value(hot_rows("SELECT %s", [json_param({"a": [1, 2]})])[0][0]) == {"a": [1, 2]}


def test_a_hot_write_rolls_back_with_the_django_transaction() -> None:
    kit = make_farm(prefix="hr")
    with pytest.raises(RuntimeError), transaction.atomic():
        for _ in range(6):  # past psycopg's prepare threshold: the prepared path runs too
            moved = hot_run("UPDATE devices_farm SET name = %s WHERE id = %s", ["x", kit.farm.pk])
            assert moved == 1
        raise RuntimeError
    kit.farm.refresh_from_db()
    assert kit.farm.name != "x"


def test_django_query_capture_sees_hot_statements_on_both_databases() -> None:
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    with CaptureQueriesContext(connection) as captured:
        hot_rows("SELECT %s", [1])
    assert [q["sql"] for q in captured.captured_queries][-1].startswith("SELECT")
    assert len(captured.captured_queries) == 1


@pytest.mark.skipif(
    connection.vendor != "postgresql", reason="server-side prepared statements: PostgreSQL"
)
def test_a_hot_statement_is_prepared_on_the_server_at_its_first_run() -> None:
    """Django leaves psycopg's prepared statements off unless the connection names a
    threshold; without one ``prepare=True`` is silently ignored and the server plans every
    statement again (config/env.py sets it)."""
    sql = "SELECT count(*) FROM devices_farm WHERE id = %s AND %s = 7"
    hot_rows(sql, [-1, 7])
    prepared = hot_rows(
        "SELECT count(*) FROM pg_prepared_statements WHERE statement LIKE %s",
        ["%FROM devices_farm WHERE id = $1 AND $2 = 7%"],
    )
    assert prepared == [(1,)]
