"""Farms can be archived (``devices.services.farm_archive``): when and by whom. Both columns
are nullable or defaulted, so adding them rewrites no rows."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("devices", "0015_telemetry_partitioned"),
    ]

    operations = [
        migrations.AddField(
            model_name="farm",
            name="archived_at",
            field=models.DateTimeField(blank=True, editable=False, null=True),
        ),
        migrations.AddField(
            model_name="farm",
            name="archived_by",
            field=models.CharField(blank=True, default="", editable=False, max_length=150),
        ),
    ]
