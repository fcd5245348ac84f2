"""Event bus tables: the per-handler inbox that absorbs redeliveries, the per-handler failure
count that survives republishing, and the dead-letter store operators replay from."""

from __future__ import annotations

from django.db import models
from django.db.models import Q

from events.states import DeadLetterReason, DeadLetterStatus

KEY_MAX_LENGTH = 255
HANDLER_MAX_LENGTH = 200
TYPE_MAX_LENGTH = 100


class EventInbox(models.Model):
    """One row per (handler, business fact) handled; written in the handler's transaction."""

    handler = models.CharField(max_length=HANDLER_MAX_LENGTH)
    idempotency_key = models.CharField(max_length=KEY_MAX_LENGTH)
    event_type = models.CharField(max_length=TYPE_MAX_LENGTH)
    event_id = models.CharField(max_length=64)  # the publish that was handled
    version = models.PositiveIntegerField()  # the envelope's version before any upcast
    processed_at = models.DateTimeField()

    class Meta:
        verbose_name_plural = "event inboxes"
        constraints = [
            models.UniqueConstraint(
                fields=["handler", "idempotency_key"], name="event_inbox_once_per_handler"
            )
        ]
        # The retention prune's oldest-first scan (common.retention).
        indexes = [models.Index(fields=["processed_at"], name="event_inbox_processed")]

    def __str__(self) -> str:
        return f"{self.handler}:{self.idempotency_key}"


class EventHandlerAttempt(models.Model):
    """Failed attempts of one handler on one business fact, counted across redeliveries and
    republishes (Celery's retry counter restarts with every new message)."""

    handler = models.CharField(max_length=HANDLER_MAX_LENGTH)
    idempotency_key = models.CharField(max_length=KEY_MAX_LENGTH)
    event_type = models.CharField(max_length=TYPE_MAX_LENGTH)
    attempts = models.PositiveIntegerField(default=0)
    last_error = models.TextField(blank=True, default="")
    envelope = models.JSONField()  # the latest failing envelope, for the dead letter
    first_failed_at = models.DateTimeField()
    last_failed_at = models.DateTimeField()

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["handler", "idempotency_key"], name="event_attempt_per_handler_key"
            )
        ]

    def __str__(self) -> str:
        return f"{self.handler}:{self.idempotency_key} x{self.attempts}"


class EventDeadLetter(models.Model):
    """An envelope a handler (or the consumer, handler ``*``) gave up on; at most one open per
    (handler, key), so redeliveries of a dead event add no rows and no alerts."""

    envelope = models.JSONField()
    event_type = models.CharField(max_length=TYPE_MAX_LENGTH)
    idempotency_key = models.CharField(max_length=KEY_MAX_LENGTH)
    handler = models.CharField(max_length=HANDLER_MAX_LENGTH)
    reason = models.CharField(max_length=32, choices=DeadLetterReason.choices)
    attempts = models.PositiveIntegerField(default=0)
    last_error = models.TextField(blank=True, default="")
    status = models.CharField(
        max_length=16, choices=DeadLetterStatus.choices, default=DeadLetterStatus.OPEN
    )
    version = models.PositiveIntegerField(default=0)
    created_at = models.DateTimeField()
    replayed_at = models.DateTimeField(null=True, blank=True)
    replayed_by = models.CharField(max_length=150, blank=True, default="")
    replay_event_id = models.CharField(max_length=64, blank=True, default="")

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["handler", "idempotency_key"],
                condition=Q(status=DeadLetterStatus.OPEN),
                name="event_dead_letter_one_open",
            )
        ]
        indexes = [models.Index(fields=["status", "event_type", "handler"])]

    def __str__(self) -> str:
        return f"#{self.pk} {self.event_type} {self.handler} ({self.reason})"
