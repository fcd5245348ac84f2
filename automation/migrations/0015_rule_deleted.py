"""A rule can be deleted: ``deleted_at`` and ``deleted_by`` on the row (its history keeps
pointing at it), and a check that a deleted rule is never active. Both columns are added
without rewriting the table (a nullable column, and a default PostgreSQL stores once); every
existing rule passes the check."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("automation", "0014_intent_is_device_command"),
    ]

    operations = [
        migrations.AddField(
            model_name="automationrule",
            name="deleted_at",
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="automationrule",
            name="deleted_by",
            field=models.CharField(blank=True, default="", max_length=150),
        ),
        migrations.AddConstraint(
            model_name="automationrule",
            constraint=models.CheckConstraint(
                condition=models.Q(
                    ("deleted_at__isnull", True), ("is_active", False), _connector="OR"
                ),
                name="deleted_rule_inactive",
            ),
        ),
    ]
