"""The names of the tasks one module sends and another registers, schedules or counts, in one
place: the stages hand work on by name (``common.handoff``), the apps' tasks modules register
these names, beat schedules the sweep (``config.beat``) and the metrics count the stages
(``config.metrics``). It lives in ``config``, which imports no app, so that config's own
modules can name them too."""

from __future__ import annotations

# The crossing: the bridge's batches (their names are its wire contract, so a batch queued
# across an upgrade still finds its task), then evaluate, dispatch and reconcile.
TELEMETRY_INGEST = "automation.telemetry_ingest"
DEVICE_MESSAGES_RECONCILE = "automation.device_messages_reconcile"
EVENTS_EVALUATE = "automation.endpoint_events_evaluate"
COMMANDS_DISPATCH = "automation.commands_dispatch"
COMMANDS_RECONCILE = "automation.commands_reconcile"
# Sweeps and ensures that beat schedules (``config.beat``).
EVENTS_SWEEP = "automation.endpoint_events_sweep"
COMMANDS_SWEEP = "automation.commands_sweep"
RULE_SCHEDULES_ENSURE = "automation.rule_schedules_ensure"
WATCHDOGS_SWEEP = "automation.watchdogs_sweep"
SCHEDULER_POLL_DUE = "scheduler.poll_due"
SCHEDULER_EXECUTE_BATCH = "scheduler.execute_batch"
SCHEDULER_EXECUTE = "automation.scheduler_execute"
SCHEDULER_RELEASE_STALE = "scheduler.release_stale"
SCHEDULER_TRACE_PRUNE = "scheduler.trace_prune"
NOTIFICATIONS_SWEEP = "notifications.sweep"
NOTIFICATION_DELIVER = "notifications.deliver"
ALARMS_NOTIFY = "notifications.alarms_notify"
EVENTS_DELIVER = "events.event_deliver"
METRICS_TOUCHED = "reminders.endpoint_metrics_touched"
REMINDERS_RECONCILE = "reminders.reconcile"
REPORT_SUBSCRIPTIONS_ENSURE = "reminders.report_subscriptions_ensure"
USER_MESSAGES_ENSURE = "reminders.user_messages_ensure"
IDEMPOTENCY_RECORDS_PRUNE = "common.idempotency_records_prune"
RETENTION_PRUNE = "common.retention_prune"
TELEMETRY_ROLLUPS_ADVANCE = "devices.telemetry_rollups_advance"
DEVICES_OFFLINE_SWEEP = "devices.devices_offline_sweep"
ROLLOUTS_DRIVE = "rollouts.drive"
# A no-op a test harness sends to see a worker consume.
WORKER_WAKE = "config.worker_wake"

PREVIOUS_TASK_NAMES: dict[str, str] = {
    # "intent" gave way to "command".
    "automation.command_intents_dispatch": COMMANDS_DISPATCH,
    "automation.command_intents_reconcile": COMMANDS_RECONCILE,
    "automation.command_intents_sweep": COMMANDS_SWEEP,
    # Ingest moved from the devices app, the scheduler out of the automation app.
    "devices.telemetry_ingest": TELEMETRY_INGEST,
    "automation.scheduler_poll_due": SCHEDULER_POLL_DUE,
    "automation.scheduler_execute_batch": SCHEDULER_EXECUTE_BATCH,
    "automation.scheduler_release_stale": SCHEDULER_RELEASE_STALE,
    "automation.scheduler_trace_prune": SCHEDULER_TRACE_PRUNE,
}
"""Previous name -> name now, of every renamed task, in one table. For one release only: a
message an older release queued under the previous name (a hand-off in flight during the
upgrade, a beat of the previous release still running) is consumed by the same task, on the
same queue, with the same limits and retries (each tasks module registers the previous names
of its tasks with ``config.celery.previous_names_register``). Drop an entry, and its alias
with it, in the release after."""
