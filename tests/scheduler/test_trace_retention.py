"""Retention: records finished more than SCHEDULER_TRACE_RETENTION_DAYS ago go, with their
blobs, in bounded batches; a row still naming a pruned blob forgets it; a blob the storage
would not delete keeps its record for the next run."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import pytest
from django.core.files.base import ContentFile
from django.db import connection
from django.test.utils import CaptureQueriesContext

from scheduler.models import DueWork, TraceRecord
from scheduler.services import scheduler_trace_prune
from scheduler.tasks import scheduler_trace_prune_task
from scheduler.trace_storage import trace_storage
from tests.scheduler.conftest import NOW
from tests.scheduler.factories import DueWorkFactory

pytestmark = pytest.mark.django_db


def _execution(row: DueWork, token: int, finished: datetime, *, blob: bool) -> str:
    name = ""
    if blob:
        path = f"automation-scheduler/{row.pk}/v{token}.txt"
        name = trace_storage().save(path, ContentFile(b"diagnostics"))
    TraceRecord.objects.create(
        scheduler_id=row.pk,
        automation_type=row.automation_type,
        scheduler_key=row.scheduler_key,
        token=token,
        attempt=1,
        outcome="completed",
        started_at=finished,
        finished_at=finished,
        duration_ms=0,
        worker="w:1",
        trace_blob_name=name,
    )
    return name


def test_old_records_and_their_blobs_go_recent_ones_stay(settings: Any) -> None:
    settings.SCHEDULER_TRACE_RETENTION_DAYS = 30
    old, recent = NOW - timedelta(days=31), NOW - timedelta(days=29)
    row = DueWorkFactory()
    first = _execution(row, 1, old, blob=True)
    last = _execution(row, 2, old, blob=True)
    DueWork.objects.filter(pk=row.pk).update(trace_blob_name=last)
    newer_row = DueWorkFactory()
    kept = _execution(newer_row, 1, recent, blob=True)
    DueWork.objects.filter(pk=newer_row.pk).update(trace_blob_name=kept)
    _execution(newer_row, 2, old, blob=False)

    result = scheduler_trace_prune(now=NOW)
    assert (result.records, result.blobs) == (3, 2)
    assert list(TraceRecord.objects.values_list("trace_blob_name", flat=True)) == [kept]
    storage = trace_storage()
    assert not storage.exists(first) and not storage.exists(last) and storage.exists(kept)
    assert DueWork.objects.get(pk=row.pk).trace_blob_name == ""
    assert DueWork.objects.get(pk=newer_row.pk).trace_blob_name == kept


def test_pruning_runs_in_bounded_batches_of_constant_cost(settings: Any) -> None:
    settings.SCHEDULER_TRACE_RETENTION_DAYS = 1
    row = DueWorkFactory()
    for token in range(1, 13):
        _execution(row, token, NOW - timedelta(days=2), blob=False)
    with CaptureQueriesContext(connection) as small:
        assert scheduler_trace_prune(now=NOW, batch=4).records == 12
    for token in range(1, 25):
        _execution(row, token, NOW - timedelta(days=2), blob=False)
    with CaptureQueriesContext(connection) as large:
        assert scheduler_trace_prune(now=NOW, batch=8).records == 24
    # 3 full batches + the empty read each time, whatever the batch size.
    assert len(small.captured_queries) == len(large.captured_queries)
    assert not TraceRecord.objects.exists()


def test_a_blob_the_storage_keeps_keeps_its_record(settings: Any, monkeypatch) -> None:
    row = DueWorkFactory()
    stuck = _execution(row, 1, NOW - timedelta(days=90), blob=True)
    _execution(row, 2, NOW - timedelta(days=90), blob=True)

    def refuse(name: str) -> None:
        if name == stuck:
            raise OSError("bucket unreachable")

    monkeypatch.setattr(type(trace_storage()), "delete", lambda self, name: refuse(name))
    assert scheduler_trace_prune(now=NOW).records == 1
    assert list(TraceRecord.objects.values_list("trace_blob_name", flat=True)) == [stuck]


def test_the_beat_task_prunes_with_the_retention_setting(settings: Any) -> None:
    settings.SCHEDULER_TRACE_RETENTION_DAYS = 7
    row = DueWorkFactory()
    _execution(row, 1, datetime.now(NOW.tzinfo) - timedelta(days=8), blob=False)
    _execution(row, 2, datetime.now(NOW.tzinfo) - timedelta(days=6), blob=False)
    assert scheduler_trace_prune_task() == 1
    assert list(TraceRecord.objects.values_list("token", flat=True)) == [2]
