"""Webhook secrets are no longer stored: each is derived from WEBHOOK_SECRET_KEY and a
per-contact salt (notifications.webhook_secrets). A stored plain-text secret cannot become a
derived one, so it is dropped; a contact that had one sends no webhook until a new secret is
issued (manage.py webhook_secret_issue <id>) and handed to its receiver."""

import sys

from django.db import migrations, models


def _report_dropped_secrets(apps, schema_editor):
    contact = apps.get_model("notifications", "ExternalContact")
    ids = list(contact.objects.exclude(webhook_secret="").values_list("pk", flat=True))
    if ids:
        sys.stdout.write(
            f"\n  {len(ids)} external contact(s) had a stored webhook secret, now dropped: "
            f"issue each a new one (manage.py webhook_secret_issue <id>; ids "
            f"{', '.join(map(str, ids[:50]))}{' …' if len(ids) > 50 else ''})\n"
        )


class Migration(migrations.Migration):

    dependencies = [
        ("notifications", "0003_notification_time_zone_validated"),
    ]

    operations = [
        migrations.AddField(
            model_name="externalcontact",
            name="webhook_secret_salt",
            field=models.CharField(blank=True, default="", editable=False, max_length=64),
        ),
        migrations.AddField(
            model_name="externalcontact",
            name="webhook_secret_key_id",
            field=models.CharField(blank=True, default="", editable=False, max_length=16),
        ),
        migrations.RunPython(_report_dropped_secrets, migrations.RunPython.noop),
        migrations.RemoveField(
            model_name="externalcontact",
            name="webhook_secret",
        ),
    ]
