"""Hourly rollups of endpoint readings, which outlive the raw telemetry, and the one-row
watermark of how far they are folded in."""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('devices', '0011_profile_name_per_org'),
    ]

    operations = [
        migrations.CreateModel(
            name='TelemetryRollupWatermark',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('rolled_up_through', models.BigIntegerField(default=0)),
                ('horizon_id', models.BigIntegerField(default=0)),
                ('horizon_at', models.DateTimeField(blank=True, null=True)),
                ('covered_at', models.DateTimeField(blank=True, null=True)),
            ],
            options={
                'constraints': [models.CheckConstraint(condition=models.Q(('id', 1)), name='one_watermark')],
            },
        ),
        migrations.CreateModel(
            name='TelemetryRollup',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('hour', models.DateTimeField()),
                ('value_min', models.FloatField()),
                ('value_max', models.FloatField()),
                ('value_sum', models.FloatField()),
                ('value_count', models.IntegerField()),
                ('last_value', models.FloatField()),
                ('last_at', models.DateTimeField()),
                ('endpoint', models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.CASCADE, related_name='+', to='devices.deviceinstanceendpoint')),
            ],
            options={
                'indexes': [models.Index(fields=['hour'], name='rollup_hour_idx')],
                'constraints': [models.UniqueConstraint(fields=('endpoint', 'hour'), name='rollup_once_per_hour')],
            },
        ),
    ]
