"""The scheduler key is one unique constraint (issue 26): it absorbs a second row with the
same key, and on PostgreSQL its one pattern-ops index also serves the prefix matches of
reminders, reports and rule schedules (no separate ``…_like`` copy)."""

from __future__ import annotations

import uuid

import pytest
from django.db import connection, transaction

from scheduler.models import DueWork
from scheduler.services import EnsureOutcome
from tests.scheduler.conftest import ensure_report
from tests.unique_keys import key_absorbs_copies

pytestmark = pytest.mark.django_db

RUN = uuid.UUID("22222222-3333-4444-8555-666666666666")


def test_a_row_copy_is_absorbed_by_the_scheduler_key() -> None:
    row = DueWork.objects.get(pk=ensure_report(run=RUN).scheduler_id)
    key_absorbs_copies(row, "scheduler_key", f"{row.scheduler_key}:other")


def test_ensuring_a_key_twice_keeps_one_row() -> None:
    first = ensure_report(run=RUN)
    again = ensure_report(run=RUN)
    assert first.outcome == EnsureOutcome.INSERTED
    assert again.scheduler_id == first.scheduler_id
    assert DueWork.objects.count() == 1


@pytest.mark.postgres
def test_a_prefix_match_on_the_key_reads_the_unique_index() -> None:
    """As ``occurrence_sources_open`` and the report subscriptions ask: the planner may use
    the constraint's index for ``startswith`` (sequential scans priced out, as on a table
    too large to scan)."""
    ensure_report(run=RUN)
    rows = DueWork.objects.filter(
        scheduler_key__startswith="report-subscription:", status__in=["pending", "failed"]
    ).values_list("pk")
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SET LOCAL enable_seqscan = off")
        sql, params = rows.query.sql_with_params()
        cursor.execute(f"EXPLAIN {sql}", params)
        plan = "\n".join(line for (line,) in cursor.fetchall())
    assert "scheduler_key_once" in plan, plan
