"""Rollout and target vocabularies and the rollout's allowed moves (no database)."""

from __future__ import annotations

from django.db.models import TextChoices


class RolloutStatus(TextChoices):
    SCHEDULED = "scheduled"  # waiting for its start time in some farm
    RUNNING = "running"
    PAUSED = "paused"
    COMPLETED = "completed"
    ABORTED = "aborted"  # an abort criterion tripped
    CANCELLED = "cancelled"


R = RolloutStatus
ROLLOUT_MOVES: dict[str, frozenset[str]] = {
    R.SCHEDULED: frozenset({R.RUNNING, R.PAUSED, R.CANCELLED}),
    R.RUNNING: frozenset({R.PAUSED, R.COMPLETED, R.ABORTED, R.CANCELLED}),
    R.PAUSED: frozenset({R.RUNNING, R.CANCELLED}),
}
ROLLOUT_ENDED: frozenset[str] = frozenset({R.COMPLETED, R.ABORTED, R.CANCELLED})
# The states the driver ticks (a paused rollout starts nothing; its sent commands run on).
ROLLOUT_DRIVEN: frozenset[str] = frozenset({R.SCHEDULED, R.RUNNING})


class TargetStep(TextChoices):
    """What the rollout did with a target; once ``sent``, its status is its command's."""

    PENDING = "pending"
    SENT = "sent"
    SKIPPED = "skipped"


T = TargetStep
# A target moves once: a wave sends or skips it, or a stop skips it.
TARGET_MOVES: dict[str, frozenset[str]] = {T.PENDING: frozenset({T.SENT, T.SKIPPED})}


class SkipReason(TextChoices):
    INVALID_VALUE = "invalid_value"  # the endpoint's constraints refuse the value
    TARGET_DISABLED = "target_disabled"
    TARGET_RETIRED = "target_retired"
    TARGET_MAINTENANCE = "target_maintenance"
    MANUAL_OVERRIDE = "manual_override"  # an operator's hold outranks the rollout
    LOWER_PRIORITY = "lower_priority"  # a live command of a higher-priority rule does
    OTHER_ROLLOUT = "other_rollout"  # a continuous pick-up another live rollout targets
    ABORTED = "aborted"
    CANCELLED = "cancelled"
    WINDOW_CLOSED = "window_closed"


class TargetMode(TextChoices):
    SNAPSHOT = "snapshot"  # the targets are fixed when the rollout is created
    CONTINUOUS = "continuous"  # devices provisioned while it runs join it


class EndBehaviour(TextChoices):
    STOP = "stop"  # unsent targets are skipped, sent ones run to their end: completed
    CANCEL = "cancel"  # as stop, and the rollout ends cancelled


class AbortOutcome(TextChoices):
    FAILED = "failed"
    EXPIRED = "expired"
    UNCERTAIN = "uncertain"
    ANY = "any"  # any end but applied
