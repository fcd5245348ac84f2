"""The beat schedule, declared once in code. `manage.py sync_beat_schedule` writes it into
django-celery-beat's tables so operators can pause an entry in the admin; sweeps re-derive
pending work from SQL, so a lost Celery message only delays it."""

from __future__ import annotations

from dataclasses import dataclass

from django.conf import settings

from config.task_names import COMMANDS_SWEEP


@dataclass(frozen=True)
class BeatEntry:
    task: str
    every_s: float

    @property
    def expires_s(self) -> float:
        """A sweep not started within its period is dropped: the next one is already due, so
        a worker that was down finds one sweep waiting, not a pile of them."""
        return self.every_s

    @property
    def every_whole_s(self) -> int:
        """django-celery-beat's interval is whole seconds: a sub-second one stored as 0 would
        send the task in a tight loop."""
        return max(1, round(self.every_s))

    @property
    def expires_whole_s(self) -> int:
        return max(1, round(self.expires_s))


def beat_schedule() -> dict[str, BeatEntry]:
    """Read at call time, so intervals follow settings (tests run sweeps much faster)."""
    return {
        "endpoint-events-sweep-pending": BeatEntry(
            "automation.endpoint_events_sweep", float(settings.BEAT_SWEEP_INTERVAL_S)
        ),
        # Its entry name is a row of django-celery-beat's table, kept from before the rename.
        "command-intents-sweep": BeatEntry(
            COMMANDS_SWEEP, float(settings.COMMAND_SWEEP_INTERVAL_S)
        ),
        # Due work: claim and fan out (safe with two beats: claims never overlap).
        "automation-scheduler-poll-due": BeatEntry(
            "scheduler.poll_due", float(settings.SCHEDULER_POLL_INTERVAL_S)
        ),
        # Expired claims back to Pending on the backoff ladder, or on support hold.
        "automation-scheduler-release-stale": BeatEntry(
            "scheduler.release_stale", float(settings.SCHEDULER_STALE_INTERVAL_S)
        ),
        # Due notification retries and lost claims; one deliver task per due row.
        "notifications-sweep": BeatEntry(
            "notifications.sweep", float(settings.NOTIFY_SWEEP_INTERVAL_S)
        ),
        # Due alarm notifications and repeats until acknowledged, one bounded batch.
        "alarms-notify": BeatEntry(
            "notifications.alarms_notify", float(settings.ALARMS_NOTIFY_INTERVAL_S)
        ),
        # Bounded reminder reconciliation, one batch per provider (low frequency).
        "reminders-reconcile": BeatEntry(
            "reminders.reconcile", float(settings.REMINDERS_RECONCILE_INTERVAL_S)
        ),
        # Idempotency-Key records past API_IDEMPOTENCY_TTL_S, in bounded batches.
        "api-idempotency-records-prune": BeatEntry(
            "common.idempotency_records_prune",
            float(settings.API_IDEMPOTENCY_PRUNE_INTERVAL_S),
        ),
        # Every append-only table past its RETENTION_*_DAYS, in bounded batches.
        "retention-prune": BeatEntry(
            "common.retention_prune", float(settings.RETENTION_PRUNE_INTERVAL_S)
        ),
        # New telemetry folded into hourly rollups behind a watermark, rollups past
        # RETENTION_ROLLUPS_DAYS pruned; bounded batches, a concurrent run steps aside.
        "telemetry-rollups-advance": BeatEntry(
            "devices.telemetry_rollups_advance", float(settings.TELEMETRY_ROLLUP_INTERVAL_S)
        ),
        # Devices silent past their offline window go offline, once each (bounded batches).
        "devices-offline-sweep": BeatEntry(
            "devices.devices_offline_sweep", float(settings.DEVICE_HEALTH_SWEEP_INTERVAL_S)
        ),
        # Execution trace records and blobs past SCHEDULER_TRACE_RETENTION_DAYS, bounded.
        "automation-scheduler-trace-prune": BeatEntry(
            "scheduler.trace_prune", float(settings.SCHEDULER_TRACE_PRUNE_INTERVAL_S)
        ),
        # Each active report subscription gets the row of its current period.
        "reminders-report-subscriptions-ensure": BeatEntry(
            "reminders.report_subscriptions_ensure",
            float(settings.REMINDERS_REPORT_ENSURE_INTERVAL_S),
        ),
        # Each scheduled rule gets the rows of its occurrences up to the horizon.
        "automation-rule-schedules-ensure": BeatEntry(
            "automation.rule_schedules_ensure", float(settings.RULE_SCHEDULE_ENSURE_INTERVAL_S)
        ),
        # Each silence a watchdog waits for gets its row once it lasted; alarms of endpoints
        # that reported again clear.
        "automation-watchdogs-sweep": BeatEntry(
            "automation.watchdogs_sweep", float(settings.WATCHDOG_SWEEP_INTERVAL_S)
        ),
        # Each running rollout's next wave (bounded; two beats' ticks never overlap a lease).
        "rollouts-drive": BeatEntry("rollouts.drive", float(settings.ROLLOUTS.tick_interval_s)),
        # Each live user message gets its rows up to the horizon (same cadence as reports).
        "reminders-user-messages-ensure": BeatEntry(
            "reminders.user_messages_ensure",
            float(settings.REMINDERS_REPORT_ENSURE_INTERVAL_S),
        ),
    }
