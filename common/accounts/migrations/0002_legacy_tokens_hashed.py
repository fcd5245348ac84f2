"""Tokens of DRF's ``rest_framework.authtoken`` (plain keys in ``authtoken_token``) become
hashed rows: each old key keeps working, now with an expiry counted from this migration, and
the plain-text table is dropped. A database that never had the table has nothing to do."""

from datetime import UTC, timedelta

from django.conf import settings
from django.db import migrations
from django.utils import timezone

LEGACY_TABLE = "authtoken_token"


def _aware(moment):
    """SQLite hands back the naive UTC value Django stored; PostgreSQL an aware one."""
    return timezone.make_aware(moment, UTC) if timezone.is_naive(moment) else moment


def legacy_tokens_hash(apps, schema_editor):
    import hashlib

    connection = schema_editor.connection
    if LEGACY_TABLE not in connection.introspection.table_names():
        return
    api_token = apps.get_model("accounts", "ApiToken")
    days = float(getattr(settings, "API_TOKEN_TTL_DAYS", 0))
    expires_at = timezone.now() + timedelta(days=days) if days > 0 else None
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT key, created, user_id FROM {LEGACY_TABLE}")
        rows = cursor.fetchall()
    taken = set(api_token.objects.values_list("user_id", flat=True))
    api_token.objects.bulk_create(
        api_token(
            user_id=user_id,
            prefix=key[:8],
            digest=hashlib.sha256(key.encode("utf-8")).hexdigest(),
            created_at=_aware(created),
            expires_at=expires_at,
        )
        for key, created, user_id in rows
        if user_id not in taken
    )
    schema_editor.execute(f"DROP TABLE {LEGACY_TABLE}")


class Migration(migrations.Migration):
    dependencies = [("accounts", "0001_initial")]

    operations = [migrations.RunPython(legacy_tokens_hash, migrations.RunPython.noop)]
