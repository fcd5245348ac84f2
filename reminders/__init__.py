"""Reminders and report subscriptions on the due-work scheduler (docs/spec.md §5).

Invariants:
* event handlers, setting changes and reconciliation all go through one source flow
  (``services.sync``) and the scheduler's key helpers, so every path lands on the same keys;
  old rows are deactivated before new ones are ensured, and completed rows are never touched;
* a pending row stores only its key, schedule and input hash: setting, source, recipients,
  template and channels are reloaded and revalidated when it runs;
* reconciliation is bounded (active sources, watermark, due window, farm allowlist, batch,
  cursor) and advances its watermark only with a successful batch;
* nothing here sends: due rows are handed to notifications keyed by their SchedulerKey.
"""
