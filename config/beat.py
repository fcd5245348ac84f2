"""The beat schedule, declared once in code. `manage.py sync_beat_schedule` writes it into
django-celery-beat's tables so operators can pause an entry in the admin; sweeps re-derive
pending work from SQL, so a lost Celery message only delays it."""

from __future__ import annotations

from dataclasses import dataclass

from django.conf import settings

from config.task_names import (
    ALARMS_NOTIFY,
    COMMANDS_SWEEP,
    DEVICES_OFFLINE_SWEEP,
    EVENTS_SWEEP,
    IDEMPOTENCY_RECORDS_PRUNE,
    NOTIFICATIONS_SWEEP,
    REMINDERS_RECONCILE,
    REPORT_SUBSCRIPTIONS_ENSURE,
    RETENTION_PRUNE,
    ROLLOUTS_DRIVE,
    RULE_SCHEDULES_ENSURE,
    SCHEDULER_POLL_DUE,
    SCHEDULER_RELEASE_STALE,
    SCHEDULER_TRACE_PRUNE,
    TELEMETRY_ROLLUPS_ADVANCE,
    USER_MESSAGES_ENSURE,
    WATCHDOGS_SWEEP,
)


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
            EVENTS_SWEEP, float(settings.BEAT_SWEEP_INTERVAL_S)
        ),
        # Its entry name is a row of django-celery-beat's table, kept from before the rename.
        "command-intents-sweep": BeatEntry(
            COMMANDS_SWEEP, float(settings.COMMAND_SWEEP_INTERVAL_S)
        ),
        # Due work: claim and fan out (safe with two beats: claims never overlap).
        "automation-scheduler-poll-due": BeatEntry(
            SCHEDULER_POLL_DUE, float(settings.SCHEDULER_POLL_INTERVAL_S)
        ),
        # Expired claims back to Pending on the backoff ladder, or on support hold.
        "automation-scheduler-release-stale": BeatEntry(
            SCHEDULER_RELEASE_STALE, float(settings.SCHEDULER_STALE_INTERVAL_S)
        ),
        # Due notification retries and lost claims; one deliver task per due row.
        "notifications-sweep": BeatEntry(
            NOTIFICATIONS_SWEEP, float(settings.NOTIFY_SWEEP_INTERVAL_S)
        ),
        # Due alarm notifications and repeats until acknowledged, one bounded batch.
        "alarms-notify": BeatEntry(ALARMS_NOTIFY, float(settings.ALARMS_NOTIFY_INTERVAL_S)),
        # Bounded reminder reconciliation, one batch per provider (low frequency).
        "reminders-reconcile": BeatEntry(
            REMINDERS_RECONCILE, float(settings.REMINDERS_RECONCILE_INTERVAL_S)
        ),
        # Idempotency-Key records past API_IDEMPOTENCY_TTL_S, in bounded batches.
        "api-idempotency-records-prune": BeatEntry(
            IDEMPOTENCY_RECORDS_PRUNE,
            float(settings.API_IDEMPOTENCY_PRUNE_INTERVAL_S),
        ),
        # Every append-only table past its RETENTION_*_DAYS, in bounded batches.
        "retention-prune": BeatEntry(RETENTION_PRUNE, float(settings.RETENTION_PRUNE_INTERVAL_S)),
        # New telemetry folded into hourly rollups behind a watermark, rollups past
        # RETENTION_ROLLUPS_DAYS pruned; bounded batches, a concurrent run steps aside.
        "telemetry-rollups-advance": BeatEntry(
            TELEMETRY_ROLLUPS_ADVANCE, float(settings.TELEMETRY_ROLLUP_INTERVAL_S)
        ),
        # Devices silent past their offline window go offline, once each (bounded batches).
        "devices-offline-sweep": BeatEntry(
            DEVICES_OFFLINE_SWEEP, float(settings.DEVICE_HEALTH_SWEEP_INTERVAL_S)
        ),
        # Execution trace records and blobs past SCHEDULER_TRACE_RETENTION_DAYS, bounded.
        "automation-scheduler-trace-prune": BeatEntry(
            SCHEDULER_TRACE_PRUNE, float(settings.SCHEDULER_TRACE_PRUNE_INTERVAL_S)
        ),
        # Each active report subscription gets the row of its current period.
        "reminders-report-subscriptions-ensure": BeatEntry(
            REPORT_SUBSCRIPTIONS_ENSURE,
            float(settings.REMINDERS_REPORT_ENSURE_INTERVAL_S),
        ),
        # Each scheduled rule gets the rows of its occurrences up to the horizon.
        "automation-rule-schedules-ensure": BeatEntry(
            RULE_SCHEDULES_ENSURE, float(settings.RULE_SCHEDULE_ENSURE_INTERVAL_S)
        ),
        # Each silence a watchdog waits for gets its row once it lasted; alarms of endpoints
        # that reported again clear.
        "automation-watchdogs-sweep": BeatEntry(
            WATCHDOGS_SWEEP, float(settings.WATCHDOG_SWEEP_INTERVAL_S)
        ),
        # Each running rollout's next wave (bounded; two beats' ticks never overlap a lease).
        "rollouts-drive": BeatEntry(ROLLOUTS_DRIVE, float(settings.ROLLOUTS.tick_interval_s)),
        # Each live user message gets its rows up to the horizon (same cadence as reports).
        "reminders-user-messages-ensure": BeatEntry(
            USER_MESSAGES_ENSURE,
            float(settings.REMINDERS_REPORT_ENSURE_INTERVAL_S),
        ),
    }
