"""Workers find work in the coordination table only: claiming and the due poll never name the
trace table and never touch the trace storage, however much trace there is."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from scheduler.models import DueWork, TraceRecord
from scheduler.services import (
    ClaimedRow,
    ClaimStrategy,
    scheduler_claim_due,
    scheduler_due_fan_out,
    scheduler_process_due,
)
from tests.scheduler import recording_storage
from tests.scheduler.conftest import NOW, due_rows, ensure_report

pytestmark = pytest.mark.django_db
COORDINATION = DueWork._meta.db_table
TRACE = TraceRecord._meta.db_table
TRANSACTION_CONTROL = ("SAVEPOINT", "RELEASE", "ROLLBACK", "BEGIN", "COMMIT")


@pytest.fixture
def recorded(settings: Any) -> list[tuple[str, str]]:
    """Both the trace alias and the default storage record every call."""
    backend = {"BACKEND": "tests.scheduler.recording_storage.RecordingStorage"}
    settings.STORAGES = {**settings.STORAGES, "default": backend, "scheduler_traces": backend}
    recording_storage.CALLS.clear()
    return recording_storage.CALLS


def _table_statements(queries: CaptureQueriesContext) -> list[str]:
    return [
        q["sql"]
        for q in queries.captured_queries
        if not q["sql"].lstrip().upper().startswith(TRANSACTION_CONTROL)
    ]


@pytest.mark.parametrize("strategy", [None, ClaimStrategy.ROWWISE])
def test_claim_and_poll_touch_only_the_coordination_table(
    handler, recorded, strategy, django_capture_on_commit_callbacks
) -> None:
    handler.trace = {"diagnostics": "large"}
    for _ in range(3):
        ensure_report()
    with django_capture_on_commit_callbacks(execute=True):
        scheduler_process_due(clock=lambda: NOW)
    # There is a trace to scan: records and blobs (and this storage sees what touches them).
    blobs = set(TraceRecord.objects.values_list("trace_blob_name", flat=True))
    assert len(blobs) == 3 and blobs <= {name for call, name in recorded if call == "save"}
    recorded.clear()
    due_rows(7)
    handed: list[ClaimedRow] = []
    with CaptureQueriesContext(connection) as queries:
        claimed = scheduler_claim_due(now=NOW, limit=2, strategy=strategy)
        polled = scheduler_due_fan_out(now=NOW, enqueue=handed.extend, batch=2, chunk=2)
    assert len(claimed) == 2 and polled == 5 == len(handed)
    statements = _table_statements(queries)
    assert statements and all(COORDINATION in sql for sql in statements), statements
    assert not [sql for sql in statements if TRACE in sql]
    assert recorded == []
