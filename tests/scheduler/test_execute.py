"""Execution: the registered handler revalidates and runs at due time; its outcome decides the
row (Completed with small coordinates, Deactivated as an outcome, held, failed); diagnostics go
to file storage; a lost claim rolls the handler's writes back."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import Any

import pytest
from django.core.files.storage import default_storage
from django.db import connection
from django.utils import timezone

from config.celery import app as celery_app
from scheduler.models import AutomationType, DueWork
from scheduler.registry import (
    HandlerResult,
    HoldForSupport,
    PermanentFailure,
    ReminderSettingInactive,
    SchedulerJob,
    SourceNoLongerValid,
    scheduler_handler_for,
    scheduler_handler_override,
    scheduler_handler_register,
    scheduler_handler_unregister,
)
from scheduler.services import (
    scheduler_claim_due,
    scheduler_deactivate_by_key,
    scheduler_execute,
    scheduler_process_due,
)
from scheduler.states import SchedulerReason
from scheduler.tasks import scheduler_poll_due_task, scheduler_release_stale_task
from tests.scheduler.conftest import NOW, RecordingHandler, effect_counts, ensure_report

pytestmark = pytest.mark.django_db


def _claim_one() -> tuple[int, int]:
    (claim,) = scheduler_claim_due(now=NOW)
    return claim.scheduler_id, claim.token


def test_success_completes_with_small_coordinates_and_a_trace_blob(handler) -> None:
    handler.trace = {"rendered": "x" * 50_000, "recipients": ["a@example.org"] * 100}
    pk = ensure_report().scheduler_id
    _, token = _claim_one()
    assert scheduler_execute(scheduler_id=pk, token=token, now=NOW) == "completed"
    row = DueWork.objects.get(pk=pk)
    assert row.status == "completed" and row.completed_on == NOW
    assert row.dispatch_result_json == {"notificationId": 42}
    assert row.processing_lease_expires_on is None
    with default_storage.open(row.trace_blob_name) as blob:
        trace = json.load(blob)
    assert trace["schedulerKey"] == row.scheduler_key and len(trace["rendered"]) == 50_000
    (job,) = handler.runs
    assert (job.scheduler_id, job.token, job.scheduler_key) == (pk, token, row.scheduler_key)
    assert job.input_hash == row.input_hash and job.now == NOW


@pytest.mark.parametrize(
    ("raised", "reason"),
    [
        (SourceNoLongerValid("document deleted"), SchedulerReason.SOURCE_NO_LONGER_VALID),
        (ReminderSettingInactive("setting off"), SchedulerReason.REMINDER_SETTING_INACTIVE),
    ],
)
def test_invalid_source_or_setting_at_due_time_deactivates_not_fails(handler, raised, reason):
    handler.revalidate_raises = raised
    pk = ensure_report().scheduler_id
    _, token = _claim_one()
    assert scheduler_execute(scheduler_id=pk, token=token, now=NOW) == "deactivated"
    row = DueWork.objects.get(pk=pk)
    assert (row.status, row.failure_reason_code, row.retry_count) == ("deactivated", reason, 0)
    assert handler.runs == []  # revalidation stopped it before anything was queued


def test_input_changed_at_due_time_is_held_for_support(handler) -> None:
    handler.revalidate_raises = HoldForSupport("reloaded input hashes differently")
    pk = ensure_report().scheduler_id
    _, token = _claim_one()
    assert scheduler_execute(scheduler_id=pk, token=token, now=NOW) == "held"
    row = DueWork.objects.get(pk=pk)
    assert (row.status, row.is_on_support_hold) == ("pending", True)
    assert row.failure_reason_code == SchedulerReason.INPUT_HASH_CONFLICT


def test_permanent_failure_is_failed_without_retry(handler) -> None:
    handler.run_raises = PermanentFailure("template missing", trace="long diagnostics")
    pk = ensure_report().scheduler_id
    _, token = _claim_one()
    assert scheduler_execute(scheduler_id=pk, token=token, now=NOW) == "failed"
    row = DueWork.objects.get(pk=pk)
    assert (row.status, row.retry_count, row.next_retry_on) == ("failed", 0, None)
    with default_storage.open(row.trace_blob_name) as blob:
        assert blob.read() == b"long diagnostics"


def test_oversized_coordinates_fail_instead_of_bloating_the_row(handler) -> None:
    handler.coordinates = {"rendered": "x" * 10_000}
    pk = ensure_report().scheduler_id
    _, token = _claim_one()
    assert scheduler_execute(scheduler_id=pk, token=token, now=NOW) == "failed"
    row = DueWork.objects.get(pk=pk)
    assert row.failure_reason_code == SchedulerReason.RESULT_TOO_LARGE
    assert row.dispatch_result_json is None


@contextmanager
def _without_handler(automation_type: str) -> Iterator[None]:
    """Take the app's registered handler out for a test, and put it back."""
    previous = scheduler_handler_for(automation_type)
    scheduler_handler_unregister(automation_type)
    try:
        yield
    finally:
        if previous is not None:
            scheduler_handler_register(automation_type, previous, replace=True)


def test_a_type_without_a_handler_is_retried_then_held() -> None:
    with _without_handler(AutomationType.REPORT_SUBSCRIPTION):
        _a_type_without_a_handler_is_retried()


def _a_type_without_a_handler_is_retried() -> None:
    assert scheduler_handler_for(AutomationType.REPORT_SUBSCRIPTION) is None
    pk = ensure_report().scheduler_id
    _, token = _claim_one()
    assert scheduler_execute(scheduler_id=pk, token=token, now=NOW) == "retry_scheduled"
    assert DueWork.objects.get(pk=pk).failure_reason_code == "handler_missing"


def test_a_lost_claim_rolls_back_the_handlers_writes(handler, effect_table) -> None:
    """The event path deactivates the row while its handler runs: the completion matches no
    row, and the effect the handler wrote is rolled back with it."""
    pk = ensure_report().scheduler_id
    _, token = _claim_one()
    key = DueWork.objects.get(pk=pk).scheduler_key

    class DeactivatedMidRun(RecordingHandler):
        def run(self, job: SchedulerJob) -> HandlerResult:
            result = super().run(job)
            scheduler_deactivate_by_key(
                scheduler_key=job.scheduler_key, reason=SchedulerReason.SETTING_CHANGED, now=NOW
            )
            return result

    with scheduler_handler_override(
        AutomationType.REPORT_SUBSCRIPTION, DeactivatedMidRun(write_effect=True)
    ):
        outcome = scheduler_execute(scheduler_id=pk, token=token, now=NOW)
    assert outcome == "lost"
    assert effect_counts() == {}
    # The deactivation ran inside the handler's transaction, so it rolled back too.
    assert DueWork.objects.get(pk=pk).status == "processing"
    assert DueWork.objects.get(scheduler_key=key).pk == pk


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_deactivated_by_the_event_path_mid_run_keeps_no_handler_effect(effect_table) -> None:
    """Another connection deactivates (and commits) while the handler runs: the worker's
    completion is rejected by Version and its effect never commits."""
    pk = ensure_report().scheduler_id
    _, token = _claim_one()

    class RacedHandler(RecordingHandler):
        def run(self, job: SchedulerJob) -> HandlerResult:
            result = super().run(job)

            def event_path() -> None:
                try:
                    scheduler_deactivate_by_key(
                        scheduler_key=job.scheduler_key,
                        reason=SchedulerReason.SETTING_CHANGED,
                        now=NOW,
                    )
                finally:
                    connection.close()

            thread = threading.Thread(target=event_path)
            thread.start()
            thread.join(timeout=30)
            return result

    with scheduler_handler_override(
        AutomationType.REPORT_SUBSCRIPTION, RacedHandler(write_effect=True)
    ):
        assert scheduler_execute(scheduler_id=pk, token=token, now=NOW) == "lost"
    assert effect_counts() == {}
    row = DueWork.objects.get(pk=pk)
    assert (row.status, row.failure_reason_code) == ("deactivated", "setting_changed")


def test_execute_with_an_old_token_does_not_run_the_handler(handler) -> None:
    pk = ensure_report().scheduler_id
    _, token = _claim_one()
    assert scheduler_execute(scheduler_id=pk, token=token - 1, now=NOW) == "lost"
    assert handler.runs == []


def test_process_due_drains_inline(handler) -> None:
    for _ in range(7):
        ensure_report()
    outcomes = scheduler_process_due(clock=lambda: NOW, batch=3)
    assert outcomes == {"completed": 7}
    assert len(handler.runs) == 7


def test_registry_refuses_a_second_handler_for_one_type() -> None:
    first, second = RecordingHandler(), RecordingHandler()
    with _without_handler(AutomationType.REMINDER):
        scheduler_handler_register(AutomationType.REMINDER, first)
        with pytest.raises(ValueError, match="already registered"):
            scheduler_handler_register(AutomationType.REMINDER, second)
        scheduler_handler_register(AutomationType.REMINDER, second, replace=True)
        assert scheduler_handler_for(AutomationType.REMINDER) is second


@pytest.fixture
def eager_celery() -> Any:
    celery_app.conf.task_always_eager = True
    yield
    celery_app.conf.task_always_eager = False


def test_beat_tasks_poll_fan_out_execute_and_release_stale(handler, eager_celery) -> None:
    now = timezone.now()
    for _ in range(3):
        ensure_report(scheduled_on=now - timedelta(minutes=1), now=now)
    assert scheduler_poll_due_task() == 3
    assert DueWork.objects.filter(status="completed").count() == 3
    ensure_report(scheduled_on=now - timedelta(minutes=1), now=now)
    assert len(scheduler_claim_due(now=now, lease_s=0)) == 1  # a worker that then vanished
    assert scheduler_release_stale_task() == 1
    assert DueWork.objects.filter(status="pending", retry_count=1).count() == 1
