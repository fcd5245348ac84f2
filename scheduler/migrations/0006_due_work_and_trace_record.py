from django.db import migrations

from common.model_renames import model_rename


class Migration(migrations.Migration):
    dependencies = [
        ("scheduler", "0005_scheduler_key_one_pattern_ops_index"),
        ("auth", "0012_alter_user_first_name_max_length"),
        ("contenttypes", "0002_remove_content_type_name"),
    ]

    operations = [
        *model_rename(
            "scheduler",
            "AutomationScheduler",
            "DueWork",
            table="automation_automationscheduler",
        ),
        *model_rename(
            "scheduler",
            "AutomationSchedulerTransition",
            "DueWorkTransition",
            table="automation_automationschedulertransition",
        ),
        *model_rename("scheduler", "AutomationJob", "TraceRecord", table="scheduler_automationjob"),
    ]
