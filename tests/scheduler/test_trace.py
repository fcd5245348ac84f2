"""The execution trace: one TraceRecord record per execution (type, key, outcome, timings,
where the delivery went, its blob), appended after the row's transaction committed, one
INSERT per executed chunk; a failed trace write never touches the row; blobs go through the
``scheduler_traces`` storage alias."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from django.db import connection, router, transaction
from django.test.utils import CaptureQueriesContext
from prometheus_client import REGISTRY

from scheduler.models import DueWork, TraceRecord
from scheduler.registry import HoldForSupport, PermanentFailure, RetryableFailure
from scheduler.routers import SchedulerTraceRouter
from scheduler.services import (
    scheduler_claim_due,
    scheduler_execute,
    scheduler_execute_chunk,
    trace_records_write,
)
from scheduler.states import SchedulerReason
from scheduler.trace_storage import trace_storage
from tests.scheduler.conftest import NOW, due_rows, ensure_report

pytestmark = pytest.mark.django_db
TRACE_TABLE = TraceRecord._meta.db_table
FAILURES = "farm_scheduler_trace_write_failures_total"


def _claim(limit: int = 50) -> list[tuple[int, int]]:
    return [(c.scheduler_id, c.token) for c in scheduler_claim_due(now=NOW, limit=limit)]


def test_a_completed_execution_is_one_record_with_its_coordinates_and_blob(
    handler, django_capture_on_commit_callbacks
) -> None:
    handler.trace = {"rendered": "x" * 5000}
    pk = ensure_report().scheduler_id
    ((_, token),) = _claim()
    with django_capture_on_commit_callbacks(execute=True):
        assert scheduler_execute(scheduler_id=pk, token=token, now=NOW) == "completed"
    row = DueWork.objects.get(pk=pk)
    (job,) = TraceRecord.objects.all()
    assert (job.scheduler_id, job.token, job.attempt) == (pk, token, 1)
    assert (job.automation_type, job.scheduler_key) == (row.automation_type, row.scheduler_key)
    assert (job.outcome, job.reason, job.coordinates) == ("completed", "", {"notificationId": 42})
    assert job.started_at == NOW and job.finished_at >= job.started_at and job.duration_ms >= 0
    assert job.worker and job.trace_blob_name == row.trace_blob_name != ""
    with trace_storage().open(job.trace_blob_name) as blob:
        assert len(json.load(blob)["rendered"]) == 5000


@pytest.mark.parametrize(
    ("raised", "outcome", "reason"),
    [
        (RetryableFailure("webhook down"), "retry_scheduled", SchedulerReason.HANDLER_ERROR),
        (PermanentFailure("no template"), "failed", SchedulerReason.HANDLER_ERROR),
        (HoldForSupport("input changed"), "held", SchedulerReason.INPUT_HASH_CONFLICT),
        (ValueError("bug"), "retry_scheduled", SchedulerReason.HANDLER_ERROR),
    ],
)
def test_every_outcome_is_traced_with_its_reason(
    handler, django_capture_on_commit_callbacks, raised, outcome, reason
) -> None:
    handler.run_raises = raised
    pk = ensure_report().scheduler_id
    ((_, token),) = _claim()
    with django_capture_on_commit_callbacks(execute=True):
        assert scheduler_execute(scheduler_id=pk, token=token, now=NOW) == outcome
    job = TraceRecord.objects.get(scheduler_id=pk)
    assert (job.outcome, job.reason, job.coordinates) == (outcome, reason, None)
    assert job.detail == str(raised) or job.detail.endswith(str(raised))
    if isinstance(raised, ValueError):  # the traceback went to a blob the record names
        assert job.trace_blob_name.endswith("-handler_error.json")


def test_a_lost_claim_is_traced_but_a_redelivery_runs_and_appends_nothing(
    handler, django_capture_on_commit_callbacks
) -> None:
    pk = ensure_report().scheduler_id
    ((_, token),) = _claim()
    with django_capture_on_commit_callbacks(execute=True):
        scheduler_execute(scheduler_id=pk, token=token, now=NOW)
        assert scheduler_execute(scheduler_id=pk, token=token, now=NOW) == "lost"  # redelivered
    assert list(TraceRecord.objects.values_list("outcome", flat=True)) == ["completed"]
    assert len(handler.runs) == 1


def test_a_rewritten_record_is_absorbed_by_the_unique_key(
    handler, django_capture_on_commit_callbacks
) -> None:
    pk = ensure_report().scheduler_id
    ((_, token),) = _claim()
    with django_capture_on_commit_callbacks(execute=True):
        scheduler_execute(scheduler_id=pk, token=token, now=NOW)
    again = TraceRecord.objects.get()
    again.pk = None
    assert trace_records_write([again]) == 1  # handed over, and absorbed
    assert TraceRecord.objects.count() == 1


def test_the_record_is_written_after_commit_and_never_for_a_rolled_back_row(
    handler, django_capture_on_commit_callbacks
) -> None:
    pk = ensure_report().scheduler_id
    ((_, token),) = _claim()
    with django_capture_on_commit_callbacks(execute=False) as pending:
        scheduler_execute(scheduler_id=pk, token=token, now=NOW)
        assert DueWork.objects.get(pk=pk).status == "completed"
        assert not TraceRecord.objects.exists()  # not yet: the row has not committed
    assert len(pending) == 1
    pending[0]()
    assert TraceRecord.objects.filter(scheduler_id=pk, outcome="completed").exists()

    other = ensure_report().scheduler_id
    ((_, other_token),) = _claim()
    with (
        django_capture_on_commit_callbacks(execute=True) as callbacks,
        pytest.raises(RuntimeError),
        transaction.atomic(),
    ):
        scheduler_execute(scheduler_id=other, token=other_token, now=NOW)
        raise RuntimeError("the caller's transaction rolls back")
    assert callbacks == [] and not TraceRecord.objects.filter(scheduler_id=other).exists()


def test_a_failed_trace_write_is_logged_and_counted_and_the_row_stands(
    handler, settings: Any, caplog, django_capture_on_commit_callbacks
) -> None:
    settings.SCHEDULER_TRACE_DATABASE = "trace-database-that-is-gone"
    pk = ensure_report().scheduler_id
    ((_, token),) = _claim()
    before = REGISTRY.get_sample_value(FAILURES) or 0.0
    with django_capture_on_commit_callbacks(execute=True):
        assert scheduler_execute(scheduler_id=pk, token=token, now=NOW) == "completed"
    assert DueWork.objects.get(pk=pk).status == "completed"
    assert (REGISTRY.get_sample_value(FAILURES) or 0.0) == before + 1
    assert "1 execution records not written" in caplog.text
    settings.SCHEDULER_TRACE_DATABASE = "default"
    assert not TraceRecord.objects.exists()


def _chunk_queries(n: int, capture: Callable[..., Any]) -> tuple[int, list[str]]:
    due_rows(n)
    rows = _claim(limit=n)
    assert len(rows) == n
    with CaptureQueriesContext(connection) as queries, capture(execute=True):
        assert scheduler_execute_chunk(rows=rows, clock=lambda: NOW) == {"completed": n}
    statements = [q["sql"] for q in queries.captured_queries]
    return len(statements), [s for s in statements if TRACE_TABLE in s]


def test_a_chunk_appends_its_records_in_one_insert_and_cost_per_row_is_flat(
    handler, django_capture_on_commit_callbacks
) -> None:
    counts = {}
    for n in (3, 6, 12):
        counts[n], traced = _chunk_queries(n, django_capture_on_commit_callbacks)
        assert len(traced) == 1 and traced[0].lstrip().upper().startswith("INSERT"), traced
    assert TraceRecord.objects.count() == 21
    per_row = (counts[6] - counts[3]) / 3
    assert per_row == (counts[12] - counts[6]) / 6  # linear: the trace adds nothing per row
    # per chunk: the claimed rows' read, the farms' read, the insert (+ savepoint)
    assert counts[3] - 3 * per_row <= 5


def test_records_carry_the_rows_farm_and_organisation(
    handler, tenants, django_capture_on_commit_callbacks
) -> None:
    alpha, _ = tenants
    pk = ensure_report().scheduler_id
    DueWork.objects.filter(pk=pk).update(farm=alpha.kit.farm)
    with django_capture_on_commit_callbacks(execute=True):
        scheduler_execute_chunk(rows=_claim(), clock=lambda: NOW)
    job = TraceRecord.objects.get(scheduler_id=pk)
    assert (job.farm_id, job.organization_id) == (alpha.kit.farm.pk, alpha.kit.farm.organization_id)


def test_blobs_go_to_the_scheduler_traces_storage_alias(
    handler, settings: Any, tmp_path: Path, django_capture_on_commit_callbacks
) -> None:
    bucket = tmp_path / "trace-bucket"
    settings.STORAGES = {
        **settings.STORAGES,
        "scheduler_traces": {
            "BACKEND": "django.core.files.storage.FileSystemStorage",
            "OPTIONS": {"location": str(bucket)},
        },
    }
    handler.trace = "plain diagnostics"
    pk = ensure_report().scheduler_id
    ((_, token),) = _claim()
    with django_capture_on_commit_callbacks(execute=True):
        scheduler_execute(scheduler_id=pk, token=token, now=NOW)
    name = DueWork.objects.get(pk=pk).trace_blob_name
    assert name.endswith("-completed.txt")
    assert (bucket / name).read_text() == "plain diagnostics"


def test_the_router_sends_only_the_trace_to_its_database(settings: Any) -> None:
    settings.SCHEDULER_TRACE_DATABASE = "traces"
    assert router.db_for_write(TraceRecord) == router.db_for_read(TraceRecord) == "traces"
    assert router.db_for_write(DueWork) == "default"
    allow = SchedulerTraceRouter().allow_migrate
    assert allow("traces", "scheduler", "tracerecord") is True
    assert allow("default", "scheduler", "tracerecord") is False
    assert allow("traces", "scheduler", "duework") is False
    assert allow("traces", "auth", None) is False
    assert allow("default", "scheduler", "duework") is None
    settings.SCHEDULER_TRACE_DATABASE = "default"
    assert allow("default", "scheduler", "tracerecord") is True
    assert allow("default", "auth", "user") is None
