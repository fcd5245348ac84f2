"""Roles that fit how farms work: ``member`` becomes ``viewer`` (it only ever read), and
``operator`` and ``gateway`` join ``admin``; the admin's staff groups, one per role, get their
permissions (``common.roles.STAFF_GROUPS``)."""

from typing import Any

from django.db import migrations, models

from common.roles import staff_groups_sync


def members_become_viewers(apps: Any, schema_editor: Any) -> None:
    member = apps.get_model("common", "OrganizationMember")
    member.objects.filter(role="member").update(role="viewer")


def viewers_become_members(apps: Any, schema_editor: Any) -> None:
    """Back to two roles: only an admin kept the right to write."""
    member = apps.get_model("common", "OrganizationMember")
    member.objects.exclude(role="admin").update(role="member")


def groups(apps: Any, schema_editor: Any) -> None:
    staff_groups_sync(apps)


class Migration(migrations.Migration):
    dependencies = [
        ("common", "0003_member_role"),
        ("auth", "0012_alter_user_first_name_max_length"),
        ("contenttypes", "0002_remove_content_type_name"),
        ("devices", "0009_farm_manual_override_minutes"),
        ("automation", "0010_execution_target_required"),
        ("scheduler", "0004_rule_schedule_type"),
        ("events", "0001_initial"),
        ("reminders", "0004_user_messages"),
        ("notifications", "0004_webhook_secrets_derived_not_stored"),
    ]

    operations = [
        migrations.AlterModelOptions(
            name="organization",
            options={
                "permissions": [
                    ("operate", "Can operate devices: manual commands, holds, retries")
                ]
            },
        ),
        migrations.AlterField(
            model_name="organizationmember",
            name="role",
            field=models.CharField(
                choices=[
                    ("viewer", "Viewer"),
                    ("operator", "Operator"),
                    ("admin", "Admin"),
                    ("gateway", "Gateway"),
                ],
                default="viewer",
                max_length=16,
            ),
        ),
        migrations.RunPython(members_become_viewers, viewers_become_members),
        migrations.RunPython(groups, migrations.RunPython.noop),
    ]
