"""The admin's staff groups get their permissions over the alarms' models (``alarms`` is one
of ``common.roles.PRODUCT_APPS``): a viewer reads alarms, an operator also acknowledges and
clears them, an admin also edits a farm's alarm policy."""

from typing import Any

from django.db import migrations

from common.roles import staff_groups_sync


def groups(apps: Any, schema_editor: Any) -> None:
    staff_groups_sync(apps)


class Migration(migrations.Migration):
    # Only what this needs: alarms' models, and automation's chain migrated first as when
    # it migrates on its own (its 0009 must run before scheduler renames its table).
    # Every later staff-group migration syncs these permissions again.
    dependencies = [
        ("alarms", "0001_initial"),
        ("automation", "0018_watchdog_operator_alarm_severity"),
    ]

    operations = [migrations.RunPython(groups, migrations.RunPython.noop)]
