"""Notification rendering and delivery (not built yet)."""
