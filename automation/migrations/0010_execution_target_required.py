"""Its own migration (its own transaction): on PostgreSQL the fill's deferred foreign-key
checks would otherwise still be pending when the column becomes NOT NULL."""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("automation", "0009_rules_priority_conditions_actions_schedules"),
    ]

    operations = [
        migrations.AlterField(
            model_name='automationruleexecution',
            name='target_endpoint',
            field=models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='+', to='devices.deviceinstanceendpoint'),
        ),
    ]
