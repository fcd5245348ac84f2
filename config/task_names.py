"""The names of the tasks one module sends and another registers, schedules or counts, in one
place: the stages hand work on by name (``common.handoff``), the apps' tasks modules register
these names, beat schedules the sweep (``config.beat``) and the metrics count the stages
(``config.metrics``). It lives in ``config``, which imports no app, so that config's own
modules can name them too."""

from __future__ import annotations

COMMANDS_DISPATCH = "automation.commands_dispatch"
COMMANDS_RECONCILE = "automation.commands_reconcile"
COMMANDS_SWEEP = "automation.commands_sweep"
EVENTS_EVALUATE = "automation.endpoint_events_evaluate"
METRICS_TOUCHED = "reminders.endpoint_metrics_touched"
NOTIFICATION_DELIVER = "notifications.deliver"

PREVIOUS_TASK_NAMES: dict[str, str] = {
    "automation.command_intents_dispatch": COMMANDS_DISPATCH,
    "automation.command_intents_reconcile": COMMANDS_RECONCILE,
    "automation.command_intents_sweep": COMMANDS_SWEEP,
}
"""Previous name -> name now, of the tasks renamed when "intent" gave way to "command". For
one release only: a message an older release queued under the previous name (a hand-off in
flight during the upgrade, a beat of the previous release still running) is consumed by the
same task, on the same queue, with the same limits and retries (``automation.tasks``
registers each previous name with ``config.celery.previous_name``). Drop this table, and the
aliases with it, in the release after."""
