"""Handlers per AutomationType: reminders and report subscriptions plug in here (usually in
their ``AppConfig.ready``), so the executor routes by registry, never by a switch.

A handler reloads what it needs at due time, revalidates it, and queues the delivery. Its
database writes commit in the same transaction as the row's Completed state, so a worker
whose claim was lost rolls them back. Outcomes other than success are typed exceptions.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from datetime import date, datetime
from typing import Any, Protocol, TypeVar

from common.registry import Registry
from scheduler.states import SCHEDULER_DEACTIVATION_REASONS, SchedulerReason

Trace = Mapping[str, Any] | str | bytes
Due = TypeVar("Due")  # what a handler resolved a row to


@dataclass(frozen=True)
class SchedulerJob:
    """What a handler gets at due time: the row's coordinates, not its inputs (reload those)."""

    scheduler_id: int
    token: int
    automation_type: str
    trigger_type: str
    scheduler_key: str
    scheduled_on: datetime
    scheduled_local_date: date | None
    time_zone_id: str
    input_hash: str
    retry_count: int
    now: datetime


@dataclass(frozen=True)
class HandlerResult:
    """``coordinates`` go to DispatchResultJson and must stay small (ids of the queued
    delivery, counts); anything large goes in ``trace``, written to file storage."""

    coordinates: Mapping[str, Any]
    trace: Trace | None = None


class SchedulerHandler(Protocol):
    def revalidate(self, job: SchedulerJob) -> None:
        """Raise :class:`Deactivate` (or a subclass) if the source or setting is no longer
        valid, :class:`HoldForSupport` if the reloaded input no longer hashes to the row's."""

    def run(self, job: SchedulerJob) -> HandlerResult:
        """Queue the delivery (idempotently by ``job.scheduler_key``) and say where it went."""


class SchedulerBatchHandler(SchedulerHandler, Protocol):
    """A handler that runs many due rows of its type in one go: one read of their sources, one
    batch of writes, so a batch costs a fixed number of statements whatever its size. The
    executor calls it inside the transaction that finishes the batch's rows."""

    def run_batch(
        self, jobs: Sequence[SchedulerJob]
    ) -> Mapping[int, HandlerResult | SchedulerOutcome]:
        """Per scheduler id, the row's result, or its typed outcome (returned, not raised).
        A row with an outcome must have written nothing: revalidate before writing, or keep
        its writes in a savepoint of its own. Raising rolls the whole batch back, and the
        executor then runs the rows one by one (``revalidate`` and ``run``)."""


class SchedulerOutcome(Exception):
    """A typed non-success outcome raised by a handler."""

    default_reason: SchedulerReason = SchedulerReason.HANDLER_ERROR

    def __init__(
        self, detail: str = "", *, reason: SchedulerReason | None = None, trace: Trace | None = None
    ) -> None:
        super().__init__(detail)
        self.reason = reason or self.default_reason
        self.detail = detail
        self.trace = trace


class Deactivate(SchedulerOutcome):
    """The row is no longer wanted: Deactivated, an outcome, never a failure."""

    default_reason = SchedulerReason.SOURCE_NO_LONGER_VALID

    def __init__(
        self, detail: str = "", *, reason: SchedulerReason | None = None, trace: Trace | None = None
    ) -> None:
        super().__init__(detail, reason=reason, trace=trace)
        if self.reason not in SCHEDULER_DEACTIVATION_REASONS:
            raise ValueError(f"{self.reason} is not a deactivation reason")


class SourceNoLongerValid(Deactivate):
    default_reason = SchedulerReason.SOURCE_NO_LONGER_VALID


class ReminderSettingInactive(Deactivate):
    default_reason = SchedulerReason.REMINDER_SETTING_INACTIVE


class HoldForSupport(SchedulerOutcome):
    """Stop and wait for a person (e.g. the reloaded input no longer matches InputHash)."""

    default_reason = SchedulerReason.INPUT_HASH_CONFLICT


class RetryableFailure(SchedulerOutcome):
    """A transient failure: retried on the backoff ladder, then held for support."""


class PermanentFailure(SchedulerOutcome):
    """A failure retrying cannot fix: Failed with the reason (ensure may reactivate it later)."""


BatchResults = dict[int, HandlerResult | SchedulerOutcome]


def scheduler_batch_each(
    jobs: Sequence[SchedulerJob],
    *,
    resolve: Callable[[SchedulerJob], Due],
    run: Callable[[SchedulerJob, Due], HandlerResult],
) -> BatchResults:
    """The body of a ``run_batch`` that read its sources once and works the rows one by
    one: each row resolved (revalidated) before it writes, so a row that ends with its typed
    outcome has written nothing, as ``SchedulerBatchHandler`` promises; any other error
    rolls the batch back to the per-row path."""
    results: BatchResults = {}
    for job in jobs:
        try:
            due = resolve(job)
        except SchedulerOutcome as outcome:
            results[job.scheduler_id] = outcome
            continue
        results[job.scheduler_id] = run(job, due)
    return results


_handlers: Registry[SchedulerHandler] = Registry("a scheduler handler")


def scheduler_handler_register(
    automation_type: str, handler: SchedulerHandler, *, replace: bool = False
) -> None:
    """Register the handler of one automation type; a second registration is a bug unless
    ``replace`` says otherwise."""
    _handlers.register(automation_type, handler, replace=replace)


def scheduler_handler_unregister(automation_type: str) -> None:
    _handlers.unregister(automation_type)


def scheduler_handler_for(automation_type: str) -> SchedulerHandler | None:
    return _handlers.get(automation_type)


def scheduler_handler_batched(handler: SchedulerHandler) -> SchedulerBatchHandler | None:
    """The handler as a batch handler, or None if it runs one row at a time."""
    return handler if callable(getattr(handler, "run_batch", None)) else None  # type: ignore[return-value]


def scheduler_handler_override(
    automation_type: str, handler: SchedulerHandler
) -> AbstractContextManager[SchedulerHandler]:
    """Swap in a handler for the duration of a block (tests, benchmarks)."""
    return _handlers.override(automation_type, handler)
