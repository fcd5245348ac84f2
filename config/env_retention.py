"""How long each append-only table keeps its rows, in days, from the environment: beat
prunes older rows in bounded batches (``common.retention``), never one a live row still
needs. Dead letters stay until handled; hourly rollups outlive the raw readings. A day may
be a fraction (``0.01``, about 15 minutes), so a long test run sees partitions roll."""

from __future__ import annotations

from typing import Any

from config.env import env_float

RETENTION_MIN_DAYS = 0.001  # about 86 s: below it a prune would race the rows it keeps

# setting -> (default days, what it keeps)
RETENTION_DEFAULTS: dict[str, tuple[float, str]] = {
    "RETENTION_TELEMETRY_DAYS": (30, "raw telemetry"),
    "RETENTION_ENDPOINT_EVENTS_DAYS": (30, "endpoint events"),
    "RETENTION_REJECTIONS_DAYS": (14, "rejected device messages"),
    "RETENTION_DEVICE_HEALTH_DAYS": (90, "devices' moves between online and offline"),
    "RETENTION_EXECUTIONS_DAYS": (180, "rule executions"),
    "RETENTION_COMMANDS_DAYS": (180, "ended commands with their transitions and receipts"),
    "RETENTION_NOTIFICATIONS_DAYS": (180, "final notifications with their attempts"),
    "RETENTION_EVENT_INBOX_DAYS": (30, "the delivered event inbox"),
    "RETENTION_ROLLUPS_DAYS": (730, "hourly rollups per endpoint"),
    # As long as the commands: a rollout's targets read their states from its commands.
    "RETENTION_ROLLOUTS_DAYS": (180, "ended rollouts with their targets and timeline"),
    "RETENTION_ALARMS_DAYS": (180, "cleared alarms with their audit trail"),
    "RETENTION_AUDIT_DAYS": (365, "the audit log of configuration changes"),
}


def retention_from_env() -> dict[str, Any]:
    """Every ``RETENTION_*_DAYS``, at least ``RETENTION_MIN_DAYS`` (read through ``getattr``
    by ``common.retention``, so each table's setting is named in one place)."""
    return {
        name: env_float(name, default, minimum=RETENTION_MIN_DAYS)
        for name, (default, _) in RETENTION_DEFAULTS.items()
    }
