"""The admin's staff groups get their permissions over the audit log (``audit`` is one of
``common.roles.PRODUCT_APPS``): every group may open its page, and the organisation role
decides what it lists (an admin's organisations only)."""

from typing import Any

from django.db import migrations

from common.roles import staff_groups_sync


def groups(apps: Any, schema_editor: Any) -> None:
    staff_groups_sync(apps)


class Migration(migrations.Migration):
    dependencies = [("audit", "0001_initial"), ("common", "0004_roles_viewer_operator_gateway")]

    operations = [migrations.RunPython(groups, migrations.RunPython.noop)]
