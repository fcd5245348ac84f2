"""Endpoint events partitioned by device time on PostgreSQL (``common.partitions``), like
their telemetry: the dedupe key and prune index carry ``event_timestamp``. An event's
telemetry and an execution's event are no longer database constraints (a key into a
partitioned table must carry its partition key; an execution outlives its event by design).
On PostgreSQL the table is rebuilt whole, every row copied."""

import django.db.models.deletion
from django.db import migrations, models

from common.migration_ops import UnlessPostgres
from common.partitions import partition_migration


class Migration(migrations.Migration):
    atomic = True

    dependencies = [
        ("automation", "0012_retention_time_index"),
        ("devices", "0015_telemetry_partitioned"),
    ]

    operations = [
        # Executions keep a plain foreign-key column: their events' table is rebuilt below on
        # PostgreSQL, which takes the constraint with the old table.
        migrations.AlterField(
            model_name="automationruleexecution",
            name="event",
            field=models.ForeignKey(
                blank=True,
                db_constraint=False,
                null=True,
                on_delete=django.db.models.deletion.DO_NOTHING,
                related_name="executions",
                to="automation.automationendpointevent",
            ),
        ),
        UnlessPostgres(
            migrations.AlterField(
                model_name="automationendpointevent",
                name="source_telemetry",
                field=models.ForeignKey(
                    db_constraint=False,
                    on_delete=django.db.models.deletion.DO_NOTHING,
                    to="devices.telemetry",
                ),
            )
        ),
        UnlessPostgres(
            migrations.RemoveConstraint(
                model_name="automationendpointevent", name="event_dedupe_once"
            )
        ),
        UnlessPostgres(
            migrations.AddConstraint(
                model_name="automationendpointevent",
                constraint=models.UniqueConstraint(
                    fields=("dedupe_key", "event_timestamp"), name="event_dedupe_once"
                ),
            )
        ),
        UnlessPostgres(
            migrations.RemoveIndex(model_name="automationendpointevent", name="event_created")
        ),
        UnlessPostgres(
            migrations.AddIndex(
                model_name="automationendpointevent",
                index=models.Index(fields=["event_timestamp"], name="event_ts"),
            )
        ),
        partition_migration(
            "automation",
            "AutomationEndpointEvent",
            "event_timestamp",
            "RETENTION_ENDPOINT_EVENTS_DAYS",
        ),
    ]
