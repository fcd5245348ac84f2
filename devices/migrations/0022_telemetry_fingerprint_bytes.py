"""Telemetry's fingerprint as 16 bytes (the first half of the payload's SHA-256) instead of
64 hex digits, and its unique key ordered (device, message_ts, fingerprint) so it also serves
a device's readings over a time window. Every row is kept: a stored fingerprint's first 32
hex digits are those 16 bytes, so a message redelivered across the upgrade still lands on
its row. On PostgreSQL one ``ALTER COLUMN … TYPE`` rewrites the (partitioned) table once."""

from typing import Any

from django.db import migrations, models

from common.migration_ops import UnlessPostgres

# A fingerprint not written by ingest (no 32 hex digits) is hashed again, never dropped.
_TO_BYTES = (
    "CASE WHEN fingerprint ~ '^[0-9a-f]{32}' THEN decode(substr(fingerprint, 1, 32), 'hex') "
    "ELSE substr(sha256(convert_to(fingerprint, 'UTF8')), 1, 16) END"
)


def _to_bytes(text: Any) -> bytes:
    import hashlib
    import re

    value = text.decode() if isinstance(text, bytes | memoryview) else str(text)
    if re.match(r"^[0-9a-f]{32}", value):
        return bytes.fromhex(value[:32])
    return hashlib.sha256(value.encode()).digest()[:16]


def forwards(apps: Any, schema_editor: Any) -> None:
    run = schema_editor.execute
    if schema_editor.connection.vendor == "postgresql":
        run(
            "ALTER TABLE devices_telemetry ALTER COLUMN fingerprint TYPE bytea "
            f"USING {_TO_BYTES}"
        )
        return
    with schema_editor.connection.cursor() as cursor:  # the column is a BLOB, still holding text
        cursor.execute("SELECT id, fingerprint FROM devices_telemetry")
        rows = [(_to_bytes(fp), pk) for pk, fp in cursor.fetchall()]
        cursor.executemany("UPDATE devices_telemetry SET fingerprint = %s WHERE id = %s", rows)


def backwards(apps: Any, schema_editor: Any) -> None:
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(
            "ALTER TABLE devices_telemetry ALTER COLUMN fingerprint TYPE varchar(64) "
            "USING encode(fingerprint, 'hex')"
        )
        return
    with schema_editor.connection.cursor() as cursor:
        cursor.execute("SELECT id, fingerprint FROM devices_telemetry")
        rows = [(bytes(fp).hex(), pk) for pk, fp in cursor.fetchall()]
        cursor.executemany("UPDATE devices_telemetry SET fingerprint = %s WHERE id = %s", rows)


class Migration(migrations.Migration):
    atomic = True

    dependencies = [
        ("devices", "0021_device_health"),
    ]

    operations = [
        migrations.RemoveConstraint(model_name="telemetry", name="telemetry_once"),
        UnlessPostgres(
            migrations.AlterField(
                model_name="telemetry",
                name="fingerprint",
                field=models.BinaryField(max_length=16),
            )
        ),
        migrations.RunPython(forwards, backwards, elidable=False),
        migrations.AddConstraint(
            model_name="telemetry",
            constraint=models.UniqueConstraint(
                fields=("device", "message_ts", "fingerprint"), name="telemetry_once"
            ),
        ),
    ]
