"""Bridge slots held by leases (``devices.services.bridge_slots``) and the registry of live
bridge processes replace the per-client-id heartbeat: a slot's row carries its bridge's beat.
The heartbeat rows are a few seconds' sign of life, not history, so none is carried over;
going back recreates the heartbeat table empty (the previous release's bridge fills it)."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("devices", "0016_farm_archived"),
    ]

    operations = [
        migrations.CreateModel(
            name="BridgeProcess",
            fields=[
                ("holder", models.CharField(max_length=200, primary_key=True, serialize=False)),
                ("seen_at", models.DateTimeField()),
            ],
        ),
        migrations.CreateModel(
            name="BridgeSlot",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("client_id", models.CharField(max_length=200, unique=True)),
                ("slot", models.PositiveSmallIntegerField()),
                ("holder", models.CharField(blank=True, default="", max_length=200)),
                ("lease_until", models.DateTimeField(blank=True, null=True)),
                ("unheld_since", models.DateTimeField(blank=True, null=True)),
                ("held_since", models.DateTimeField(blank=True, null=True)),
                ("beat_at", models.DateTimeField(blank=True, null=True)),
                ("connected", models.BooleanField(default=False)),
                ("version", models.PositiveIntegerField(default=0)),
            ],
        ),
        migrations.DeleteModel(
            name="BridgeHeartbeat",
        ),
    ]
