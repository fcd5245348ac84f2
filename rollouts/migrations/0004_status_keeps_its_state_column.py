"""The rollout's ``state`` and its timeline's ``from_state``/``to_state`` are ``status``,
``from_status`` and ``to_status`` in the code, like every other ledger; the columns keep their
names, so this changes the models' state only and the database not at all."""

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('rollouts', '0003_target_rollout_index_in_its_keys'),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.RemoveIndex(model_name='rollout', name='rollout_state'),
                migrations.RenameField(model_name='rollout', old_name='state', new_name='status'),
                migrations.AlterField(
                    model_name='rollout',
                    name='status',
                    field=models.CharField(
                        choices=[
                            ('scheduled', 'Scheduled'),
                            ('running', 'Running'),
                            ('paused', 'Paused'),
                            ('completed', 'Completed'),
                            ('aborted', 'Aborted'),
                            ('cancelled', 'Cancelled'),
                        ],
                        db_column='state',
                        max_length=16,
                    ),
                ),
                migrations.AddIndex(
                    model_name='rollout',
                    index=models.Index(fields=['status'], name='rollout_state'),
                ),
                migrations.RenameField(
                    model_name='rollouttransition', old_name='from_state', new_name='from_status'
                ),
                migrations.AlterField(
                    model_name='rollouttransition',
                    name='from_status',
                    field=models.CharField(db_column='from_state', max_length=16),
                ),
                migrations.RenameField(
                    model_name='rollouttransition', old_name='to_state', new_name='to_status'
                ),
                migrations.AlterField(
                    model_name='rollouttransition',
                    name='to_status',
                    field=models.CharField(db_column='to_state', max_length=16),
                ),
            ],
        ),
    ]
