"""Delivery statuses, reasons and allowed transitions, as plain constants (no database).

Services move a notification only along an edge listed here, with a compare-and-set on status
and version; anything else is a no-op, so a redelivered task or a late worker cannot send a
notification twice or move it backwards.
"""

from __future__ import annotations

from django.db.models import TextChoices


class NotificationStatus(TextChoices):
    QUEUED = "queued"
    SENDING = "sending"
    SENT = "sent"
    FAILED = "failed"
    CANCELLED = "cancelled"
    SKIPPED = "skipped"  # created never to be sent (opt-out, no address): visible, not silent


class NotificationReason(TextChoices):
    """Why a notification is where it is (reason codes, never free text)."""

    QUEUED = "queued"
    CLAIMED = "claimed"
    DELIVERED = "delivered"
    OPTED_OUT = "opted_out"
    CHANNEL_DISABLED = "channel_disabled"
    NO_ADDRESS = "no_address"
    CHANNEL_UNSUPPORTED = "channel_unsupported"
    RECIPIENT_GONE = "recipient_gone"
    TEMPLATE_MISSING = "template_missing"
    TEMPLATE_VARIABLE_MISSING = "template_variable_missing"
    TEMPLATE_ERROR = "template_error"
    TRANSIENT_ERROR = "transient_error"
    PERMANENT_ERROR = "permanent_error"
    DESTINATION_FORBIDDEN = "destination_forbidden"  # a webhook to a refused address
    RETRY_BUDGET_EXHAUSTED = "retry_budget_exhausted"
    LEASE_EXPIRED = "lease_expired"
    SUPPORT_RETRY = "support_retry"
    SUPPORT_CANCELLED = "support_cancelled"


class AttemptOutcome(TextChoices):
    SENT = "sent"
    TRANSIENT_ERROR = "transient_error"
    PERMANENT_ERROR = "permanent_error"


class Channel(TextChoices):
    EMAIL = "email"
    WEBHOOK = "webhook"
    INBOX = "inbox"


S = NotificationStatus
# queued -> sending -> sent | failed | queued (retry); support retries failed/cancelled rows and
# cancels queued or failed ones; a lease-expired ``sending`` row goes back to queued (or failed).
NOTIFICATION_TRANSITIONS: dict[str, frozenset[str]] = {
    S.QUEUED: frozenset({S.SENDING, S.CANCELLED, S.SKIPPED, S.FAILED}),
    S.SENDING: frozenset({S.SENT, S.FAILED, S.QUEUED}),
    S.FAILED: frozenset({S.QUEUED, S.CANCELLED}),
    S.CANCELLED: frozenset({S.QUEUED}),
}
NOTIFICATION_TERMINAL: frozenset[str] = frozenset({S.SENT, S.FAILED, S.CANCELLED, S.SKIPPED})
# What support may act on.
NOTIFICATION_RETRYABLE: frozenset[str] = frozenset({S.FAILED, S.CANCELLED})
NOTIFICATION_CANCELLABLE: frozenset[str] = frozenset({S.QUEUED, S.FAILED})
# Failures a retry cannot fix until someone changes a template: support retry re-renders.
TEMPLATE_REASONS: frozenset[str] = frozenset(
    {
        NotificationReason.TEMPLATE_MISSING,
        NotificationReason.TEMPLATE_VARIABLE_MISSING,
        NotificationReason.TEMPLATE_ERROR,
    }
)
