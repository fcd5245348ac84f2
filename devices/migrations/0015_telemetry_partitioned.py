"""Telemetry partitioned by device time on PostgreSQL (``common.partitions``): its dedupe key
and prune index carry ``message_ts``, the partition key. Elsewhere the same keys on the
plain table. On PostgreSQL the table is rebuilt whole: every row is copied into the
partitioned table (deploy/RUNBOOK.md, "Upgrading to partitioned telemetry", says how long a
million rows take)."""

from django.db import migrations, models

from common.migration_ops import UnlessPostgres
from common.partitions import partition_migration


class Migration(migrations.Migration):
    atomic = True

    dependencies = [
        ("devices", "0014_telemetry_unread_indexes_dropped"),
    ]

    operations = [
        UnlessPostgres(migrations.RemoveConstraint(model_name="telemetry", name="telemetry_once")),
        UnlessPostgres(
            migrations.AddConstraint(
                model_name="telemetry",
                constraint=models.UniqueConstraint(
                    fields=("device", "fingerprint", "message_ts"), name="telemetry_once"
                ),
            )
        ),
        UnlessPostgres(migrations.RemoveIndex(model_name="telemetry", name="telemetry_received")),
        UnlessPostgres(
            migrations.AddIndex(
                model_name="telemetry",
                index=models.Index(fields=["message_ts"], name="telemetry_ts"),
            )
        ),
        partition_migration("devices", "Telemetry", "message_ts", "RETENTION_TELEMETRY_DAYS"),
    ]
