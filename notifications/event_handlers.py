"""Loaded by the events app at start-up: operators are notified of every new dead letter."""

from __future__ import annotations

from events.registry import DeadLetterAlert, dead_letter_listener
from notifications.services.operators import dead_letter_notify_operators


@dead_letter_listener
def dead_letter_to_operators(alert: DeadLetterAlert) -> None:
    """The alert docs/spec.md §7 asks for, delivered like any notification (retries, history)."""
    dead_letter_notify_operators(alert=alert)
