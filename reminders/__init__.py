"""Reminders and report subscriptions on the due-work scheduler (not built yet)."""
