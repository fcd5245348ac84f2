"""Scheduler fixtures: a fixed clock (services take ``now``; nothing sleeps for backoff), a
recording handler registered for the test's automation type, trace blobs in a temp dir, and
a raw effect table a handler writes to, so a test can count what really ran."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from django.db import connection

from scheduler.keys import report_manual_key, scheduler_input_hash, scheduler_key
from scheduler.models import AutomationType, DueWork
from scheduler.registry import HandlerResult, SchedulerJob, scheduler_handler_override
from scheduler.services import EnsureResult, scheduler_ensure

NOW = datetime(2026, 3, 1, 8, 0, tzinfo=UTC)
EFFECT_TABLE = "test_scheduler_effect"


@pytest.fixture(autouse=True)
def _trace_storage(settings: Any, tmp_path: Path) -> Path:
    settings.MEDIA_ROOT = str(tmp_path / "media")
    return tmp_path / "media"


@dataclass
class RecordingHandler:
    """Records each run; optionally raises from revalidate/run, or writes an effect row."""

    revalidate_raises: BaseException | None = None
    run_raises: BaseException | None = None
    coordinates: dict[str, Any] = field(default_factory=lambda: {"notificationId": 42})
    trace: Any = None
    write_effect: bool = False
    runs: list[SchedulerJob] = field(default_factory=list)

    def revalidate(self, job: SchedulerJob) -> None:
        if self.revalidate_raises is not None:
            raise self.revalidate_raises

    def run(self, job: SchedulerJob) -> HandlerResult:
        self.runs.append(job)
        if self.write_effect:
            effect_insert(job.scheduler_key, job.token)
        if self.run_raises is not None:
            raise self.run_raises
        return HandlerResult(coordinates=self.coordinates, trace=self.trace)


@pytest.fixture
def handler() -> Iterator[RecordingHandler]:
    recording = RecordingHandler()
    with scheduler_handler_override(AutomationType.REPORT_SUBSCRIPTION, recording):
        yield recording


def effect_insert(key: str, token: int) -> None:
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {EFFECT_TABLE} (scheduler_key, token) VALUES (%s, %s)", [key, token]
        )


def effect_counts() -> dict[str, int]:
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT scheduler_key, COUNT(*) FROM {EFFECT_TABLE} GROUP BY scheduler_key")
        return {key: int(n) for key, n in cursor.fetchall()}


@pytest.fixture
def effect_table(db: None) -> Iterator[str]:
    """A table the test owns (raw SQL), outside Django's models and flushes."""
    with connection.cursor() as cursor:
        cursor.execute(f"DROP TABLE IF EXISTS {EFFECT_TABLE}")
        cursor.execute(
            f"CREATE TABLE {EFFECT_TABLE} (scheduler_key VARCHAR(400) NOT NULL, "
            "token INTEGER NOT NULL, pid INTEGER)"
        )
    yield EFFECT_TABLE
    with connection.cursor() as cursor:
        cursor.execute(f"DROP TABLE IF EXISTS {EFFECT_TABLE}")


def ensure_report(
    *,
    run: uuid.UUID | None = None,
    scheduled_on: datetime | None = None,
    payload: Any = "input",
    now: datetime = NOW,
) -> EnsureResult:
    """A manual report run, due a minute before ``NOW`` unless told otherwise."""
    return scheduler_ensure(
        key=report_manual_key(subscription_guid=SUBSCRIPTION, manual_run_guid=run or uuid.uuid4()),
        scheduled_on=scheduled_on or NOW - timedelta(minutes=1),
        input_hash=scheduler_input_hash(payload),
        now=now,
    )


def due_rows(count: int, *, scheduled_on: datetime = NOW - timedelta(minutes=1)) -> list[int]:
    """``count`` due rows inserted in bulk (the load tests' and benchmarks' shape)."""
    digest = scheduler_input_hash("bulk")
    rows = [
        DueWork(
            automation_type=AutomationType.REPORT_SUBSCRIPTION,
            trigger_type="manual_run",
            scheduler_key=scheduler_key(
                report_manual_key(subscription_guid=SUBSCRIPTION, manual_run_guid=uuid.uuid4())
            ),
            scheduled_on=scheduled_on,
            input_hash=digest,
            created_on=NOW,
            updated_on=NOW,
        )
        for _ in range(count)
    ]
    return [r.pk for r in DueWork.objects.bulk_create(rows, batch_size=1000)]


SUBSCRIPTION = uuid.UUID("6f1c2a8e-4b7d-4c1e-9a51-0d2f3b4c5d6e")
