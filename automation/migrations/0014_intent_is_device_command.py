from django.db import migrations

from common.model_renames import model_rename


class Migration(migrations.Migration):
    dependencies = [
        ("automation", "0013_events_partitioned"),
        ("auth", "0012_alter_user_first_name_max_length"),
        ("contenttypes", "0002_remove_content_type_name"),
    ]

    operations = model_rename(
        "automation",
        "AutomationCommandIntent",
        "DeviceCommand",
        table="automation_automationcommandintent",
    )
