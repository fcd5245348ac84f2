"""The beat sweep: the database, not the broker, holds pending deliveries. It recovers claims
whose worker was lost (lease expired) and queues one delivery task per due row, in bounded
batches."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import Q

from notifications.models import Notification, NotificationAttempt
from notifications.services.moves import notification_move
from notifications.states import AttemptOutcome, NotificationReason, NotificationStatus


@dataclass(frozen=True)
class SweepResult:
    requeued: int
    failed: int
    enqueued: int


def notifications_sweep(
    *, now: datetime, enqueue: Callable[[int], None], batch: int | None = None
) -> SweepResult:
    """Expired ``sending`` leases back to queued (or failed past the budget), then due queued
    rows handed to ``enqueue``. Delivery is idempotent, so a row queued twice sends once."""
    batch = batch or int(settings.NOTIFY_SWEEP_BATCH)
    requeued = failed = 0
    stale = Notification.objects.filter(
        status=NotificationStatus.SENDING, lease_expires_at__lte=now
    ).order_by("lease_expires_at")[:batch]
    for notification in stale:
        if _lease_expired(notification, now=now):
            if notification.status == NotificationStatus.FAILED:
                failed += 1
            else:
                requeued += 1
    grace = now - timedelta(seconds=float(settings.NOTIFY_SWEEP_AFTER_S))
    due = list(
        Notification.objects.filter(status=NotificationStatus.QUEUED)
        .filter(
            Q(next_attempt_at__lte=now) | Q(next_attempt_at__isnull=True, updated_at__lte=grace)
        )
        .order_by("next_attempt_at", "pk")
        .values_list("pk", flat=True)[:batch]
    )
    for notification_id in due:
        enqueue(notification_id)
    return SweepResult(requeued=requeued, failed=failed, enqueued=len(due))


def _lease_expired(notification: Notification, *, now: datetime) -> bool:
    """The claim's worker is gone: record the attempt as lost, then retry or fail."""
    error = "lease expired: the delivering worker was lost"
    with transaction.atomic():
        NotificationAttempt.objects.get_or_create(
            notification_id=notification.pk,
            attempt=notification.attempt_count,
            defaults={
                "started_at": notification.updated_at,
                "status_code": None,
                "error": error,
                "outcome": AttemptOutcome.TRANSIENT_ERROR,
            },
        )
        if notification.attempt_count >= notification.max_attempts:
            return notification_move(
                notification,
                NotificationStatus.FAILED,
                NotificationReason.RETRY_BUDGET_EXHAUSTED,
                now=now,
                detail=f"{notification.attempt_count} attempts; last: {error}",
                last_error=error,
            )
        return notification_move(
            notification,
            NotificationStatus.QUEUED,
            NotificationReason.LEASE_EXPIRED,
            now=now,
            detail=error,
            last_error=error,
            next_attempt_at=now,
            lease_expires_at=None,
        )
