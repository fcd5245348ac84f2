"""The admin's staff groups get their permissions over the rollouts' models (``rollouts`` is
one of ``common.roles.PRODUCT_APPS``): a viewer reads rollouts, an operator also pauses,
resumes and cancels them, an admin also configures."""

from typing import Any

from django.db import migrations

from common.roles import staff_groups_sync


def groups(apps: Any, schema_editor: Any) -> None:
    staff_groups_sync(apps)


class Migration(migrations.Migration):
    dependencies = [
        ("rollouts", "0001_initial"),
        # The latest of every product app, so the groups get every model's permissions.
        ("common", "0004_roles_viewer_operator_gateway"),
        ("devices", "0016_farm_archived"),
        ("automation", "0016_intent_origin_rollout"),
        ("scheduler", "0006_due_work_and_trace_record"),
        ("events", "0002_retention_time_index"),
        ("reminders", "0005_keys_without_like_indexes"),
        ("notifications", "0006_retention_time_index"),
    ]

    operations = [migrations.RunPython(groups, migrations.RunPython.noop)]
