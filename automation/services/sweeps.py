"""Beat's sweeps of the execution core: every piece of pending work re-derived from SQL and
handed on as a stage would have (``automation.services.spine``). A hand-off that was lost
(the Celery broker down or restarted empty) or a deadline that passed with no message to
mark it is found here; bounded, and safe when two beats run them at once."""

from __future__ import annotations

from datetime import datetime, timedelta

from django.conf import settings

from automation import coordination
from automation.services.dispatch import commands_due
from automation.services.evaluate import endpoint_events_pending
from automation.services.reconcile import commands_overdue
from automation.services.spine import Committed, hand_on


def events_sweep(*, now: datetime) -> int:
    """Hand on the events left pending past ``EVENT_SWEEP_AFTER_S``, in one bounded batch."""
    older_than = now - timedelta(seconds=settings.EVENT_SWEEP_AFTER_S)
    ids = endpoint_events_pending(older_than=older_than, limit=settings.SWEEP_BATCH_SIZE)
    hand_on(Committed(events=ids))
    return len(ids)


def commands_sweep(*, now: datetime) -> int:
    """Dispatch what is due (lost nudges, elapsed backoffs) and reconcile what is overdue
    (ack deadlines, applied windows). One beat at a time: the lock lasts one interval."""
    # The lock keeps its key from before the rename: a beat of the previous release takes the
    # same one during an upgrade.
    if not coordination.lock_try("command-intents-sweep", settings.COMMAND_SWEEP_INTERVAL_S):
        return 0
    pending_older_than = now - timedelta(seconds=settings.DISPATCH_SWEEP_AFTER_S)
    due = commands_due(
        now=now, pending_older_than=pending_older_than, limit=settings.SWEEP_BATCH_SIZE
    )
    overdue = commands_overdue(now=now, limit=settings.SWEEP_BATCH_SIZE)
    hand_on(Committed(commands_due=due, evidence=overdue))
    return len(due) + len(overdue)
