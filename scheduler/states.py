"""The due-work scheduler's statuses, reasons and allowed transitions, as plain constants (no
database). Every move of a row is a versioned compare-and-set along an edge listed here."""

from __future__ import annotations

from enum import StrEnum

from django.db.models import TextChoices


class SchedulerStatus(TextChoices):
    PENDING = "pending"
    PROCESSING = "processing"
    COMPLETED = "completed"
    FAILED = "failed"
    DEACTIVATED = "deactivated"
    CANCELLED = "cancelled"


class SchedulerReason(TextChoices):
    """Why a due-work row was deactivated, failed, retried or put on support hold."""

    SOURCE_NO_LONGER_VALID = "source_no_longer_valid"
    REMINDER_SETTING_INACTIVE = "reminder_setting_inactive"
    SETTING_CHANGED = "setting_changed"
    CANCELLED = "cancelled"
    INPUT_HASH_CONFLICT = "input_hash_conflict"
    LEASE_EXPIRED = "lease_expired"
    HANDLER_ERROR = "handler_error"
    HANDLER_MISSING = "handler_missing"
    RESULT_TOO_LARGE = "result_too_large"
    ENQUEUE_FAILED = "enqueue_failed"
    SUPPORT_RELEASED = "support_released"
    # The occurrence ran later than its lateness allows (a rule schedule after an outage).
    TOO_LATE = "too_late"


class FinishOutcome(StrEnum):
    """What became of a claimed row: what ``scheduler_execute`` returns and what its trace
    record (``TraceRecord.outcome``) says."""

    COMPLETED = "completed"
    DEACTIVATED = "deactivated"
    CANCELLED = "cancelled"
    RETRY_SCHEDULED = "retry_scheduled"
    HELD = "held"
    FAILED = "failed"
    LOST = "lost"  # the token no longer matches: a newer claim or cleanup owns the row


SS = SchedulerStatus
# Pending -> Pending (retry, update in place, hold) and Processing -> Pending (stale lease,
# transient failure, unclaimed) are listed too: every one is a versioned compare-and-set.
SCHEDULER_TRANSITIONS: dict[str, frozenset[str]] = {
    SS.PENDING: frozenset({SS.PENDING, SS.PROCESSING, SS.DEACTIVATED, SS.CANCELLED}),
    SS.PROCESSING: frozenset({SS.PENDING, SS.COMPLETED, SS.FAILED, SS.DEACTIVATED, SS.CANCELLED}),
    SS.FAILED: frozenset({SS.PENDING, SS.DEACTIVATED, SS.CANCELLED}),
    SS.DEACTIVATED: frozenset({SS.PENDING, SS.CANCELLED}),
    SS.CANCELLED: frozenset({SS.PENDING}),
}
# Completed means the delivery was queued: never sent again, kept as history.
SCHEDULER_TERMINAL: frozenset[str] = frozenset({SS.COMPLETED})
# Rows ensure() may update or reactivate when the input hash matches (docs/spec.md §4 ensure table).
SCHEDULER_ENSURE_COMPATIBLE: frozenset[str] = frozenset(
    {SS.PENDING, SS.FAILED, SS.DEACTIVATED, SS.CANCELLED}
)
SCHEDULER_REACTIVATABLE: frozenset[str] = frozenset({SS.FAILED, SS.DEACTIVATED, SS.CANCELLED})
# Rows the event path may still deactivate or cancel (a claimed row loses its token).
SCHEDULER_OPEN: frozenset[str] = frozenset({SS.PENDING, SS.PROCESSING, SS.FAILED})
# Outcomes of a due-time revalidation: the row is deactivated, not failed.
SCHEDULER_DEACTIVATION_REASONS: frozenset[str] = frozenset(
    {
        SchedulerReason.SOURCE_NO_LONGER_VALID,
        SchedulerReason.REMINDER_SETTING_INACTIVE,
        SchedulerReason.SETTING_CHANGED,
        SchedulerReason.TOO_LATE,
    }
)
