"""Worker processes on the real database: 8 processes drain 5,000 due rows with each handler
running exactly once; a worker killed mid-row is retried once after its lease; a stalled
worker that wakes up after the retry cannot complete (Version) and its effect never commits.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.utils import timezone

from scheduler.models import AutomationType, DueWork, DueWorkTransition
from scheduler.registry import scheduler_handler_override
from scheduler.services import (
    scheduler_complete,
    scheduler_fail,
    scheduler_process_due,
    scheduler_release_stale,
)
from scheduler.states import SchedulerReason
from tests.real_servers import child_database_url
from tests.scheduler.conftest import RecordingHandler, due_rows, effect_counts, ensure_report

pytestmark = pytest.mark.django_db(transaction=True)

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "tests" / "scheduler" / "worker_process.py"
WORKERS = 8
ROWS = 5000


def _child(mode: str, table: str, *extra: str) -> subprocess.Popen[str]:
    env = dict(os.environ, DATABASE_URL=child_database_url())
    return subprocess.Popen(
        [sys.executable, str(SCRIPT), mode, table, *extra],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _first_line(proc: subprocess.Popen[str]) -> str:
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if not line:
        proc.wait(timeout=30)
        raise AssertionError(f"worker exited early: {proc.stderr.read() if proc.stderr else ''}")
    return line.strip()


@pytest.mark.postgres
def test_8_worker_processes_drain_5000_rows_each_handler_once(effect_table, tmp_path) -> None:
    due_rows(ROWS, scheduled_on=timezone.now() - timedelta(minutes=1))
    go = tmp_path / "go"
    procs = [_child("drain", effect_table, str(go)) for _ in range(WORKERS)]
    try:
        for proc in procs:
            assert _first_line(proc) == "ready"
        started = time.monotonic()
        go.touch()
        results: list[dict[str, Any]] = []
        for proc in procs:
            out, err = proc.communicate(timeout=60)
            assert proc.returncode == 0, err[-2000:]
            results.append(json.loads(out.strip().splitlines()[-1]))
        elapsed = time.monotonic() - started
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
    counts = effect_counts()
    assert len(counts) == ROWS
    assert set(counts.values()) == {1}  # every row's handler ran exactly once
    assert sum(r.get("completed", 0) for r in results) == ROWS
    assert sum(1 for r in results if r.get("completed")) >= 2, results  # really concurrent
    assert DueWork.objects.filter(status="completed").count() == ROWS
    assert not DueWork.objects.exclude(status="completed").exists()
    print(f"\n{ROWS} rows by {WORKERS} processes in {elapsed:.1f}s: {results}")


def test_worker_killed_mid_row_is_retried_once_and_its_late_completion_rejected(
    effect_table,
) -> None:
    now = timezone.now()
    pk = ensure_report(scheduled_on=now - timedelta(minutes=1), now=now).scheduler_id
    child = _child("kill", effect_table)
    killed = json.loads(_first_line(child))
    child.wait(timeout=30)
    assert child.returncode == -signal.SIGKILL
    row = DueWork.objects.get(pk=pk)
    assert (row.status, row.version) == ("processing", killed["token"])
    assert effect_counts() == {}  # its uncommitted effect died with it
    lease = row.processing_lease_expires_on
    assert lease is not None
    assert scheduler_release_stale(now=lease - timedelta(seconds=1)).released == 0
    assert scheduler_release_stale(now=lease + timedelta(seconds=1)).released == 1
    row.refresh_from_db()
    assert (row.status, row.retry_count) == ("pending", 1)
    assert row.next_retry_on == lease + timedelta(seconds=1, minutes=5)
    retry_at = row.next_retry_on
    with scheduler_handler_override(
        AutomationType.REPORT_SUBSCRIPTION, RecordingHandler(write_effect=True)
    ) as live:
        assert scheduler_process_due(clock=lambda: retry_at) == {"completed": 1}
    assert len(live.runs) == 1  # retried once
    assert effect_counts() == {row.scheduler_key: 1}
    late = {"scheduler_id": pk, "token": killed["token"], "now": retry_at}
    assert not scheduler_complete(**late, coordinates={"late": True})
    assert scheduler_fail(**late, reason=SchedulerReason.HANDLER_ERROR) == "lost"
    row.refresh_from_db()
    assert (row.status, row.retry_count) == ("completed", 1)
    assert row.dispatch_result_json == {"notificationId": 42}
    expired = DueWorkTransition.objects.filter(scheduler_id=pk, reason_code="lease_expired")
    assert expired.count() == 1


@pytest.mark.postgres
def test_stalled_worker_waking_after_the_retry_cannot_complete(effect_table) -> None:
    """SIGSTOP mid-row, lease expires, the row is retried and completed elsewhere; SIGCONT:
    the stalled worker's completion matches no row and its effect rolls back."""
    now = timezone.now()
    pk = ensure_report(scheduled_on=now - timedelta(minutes=1), now=now).scheduler_id
    child = _child("stall", effect_table)
    try:
        stalled = json.loads(_first_line(child))
        row = DueWork.objects.get(pk=pk)
        lease = row.processing_lease_expires_on
        assert lease is not None and row.version == stalled["token"]
        scheduler_release_stale(now=lease + timedelta(seconds=1))
        row.refresh_from_db()
        retry_at = row.next_retry_on
        assert retry_at is not None
        with scheduler_handler_override(
            AutomationType.REPORT_SUBSCRIPTION, RecordingHandler(write_effect=True)
        ):
            assert scheduler_process_due(clock=lambda: retry_at) == {"completed": 1}
        os.kill(child.pid, signal.SIGCONT)
        out, err = child.communicate(timeout=30)
    finally:
        if child.poll() is None:
            child.kill()
    assert child.returncode == 0, err[-2000:]
    assert json.loads(out.strip().splitlines()[-1]) == {"outcome": "lost"}
    row.refresh_from_db()
    assert (row.status, row.dispatch_result_json) == ("completed", {"notificationId": 42})
    assert effect_counts() == {row.scheduler_key: 1}
