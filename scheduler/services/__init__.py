"""Every write and decision of the due-work scheduler: ensure, claim, execute, finish,
stale cleanup, the execution trace and its retention. One module per step; import from
here."""

from scheduler.services.claim import ClaimedRow, ClaimStrategy, scheduler_claim_due
from scheduler.services.ensure import EnsureOutcome, EnsureResult, scheduler_ensure
from scheduler.services.execute import (
    scheduler_due_fan_out,
    scheduler_execute,
    scheduler_execute_chunk,
    scheduler_process_due,
)
from scheduler.services.finish import (
    StaleResult,
    scheduler_cancel,
    scheduler_complete,
    scheduler_deactivate,
    scheduler_deactivate_by_key,
    scheduler_fail,
    scheduler_hold,
    scheduler_hold_release,
    scheduler_release_stale,
    scheduler_unclaim,
)
from scheduler.services.moves import scheduler_backoff, scheduler_move
from scheduler.services.trace import (
    TraceBatch,
    TracePruneResult,
    scheduler_trace_prune,
    trace_records_write,
)
from scheduler.states import FinishOutcome

__all__ = [
    "ClaimStrategy",
    "ClaimedRow",
    "EnsureOutcome",
    "EnsureResult",
    "FinishOutcome",
    "StaleResult",
    "TraceBatch",
    "TracePruneResult",
    "scheduler_backoff",
    "scheduler_cancel",
    "scheduler_claim_due",
    "scheduler_complete",
    "scheduler_deactivate",
    "scheduler_deactivate_by_key",
    "scheduler_due_fan_out",
    "scheduler_ensure",
    "scheduler_execute",
    "scheduler_execute_chunk",
    "scheduler_fail",
    "scheduler_hold",
    "scheduler_hold_release",
    "scheduler_move",
    "scheduler_process_due",
    "scheduler_release_stale",
    "scheduler_trace_prune",
    "scheduler_unclaim",
    "trace_records_write",
]
