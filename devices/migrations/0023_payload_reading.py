"""``devices_payload_reading(payload, key, kind)``: one value of a stored telemetry message as
a number (``kind`` "number": a JSON number; "bool": a JSON boolean as 0/1), else NULL.

A message is stored as the device sent it, JSON that Python parsed; ``jsonb`` still refuses
some of it (``NaN``, a lone surrogate escape) and a double some numbers. One such message
must read as no value, not fail a device's whole series: the function catches the error.
PostgreSQL only; SQLite reads the same value inline (``devices.readings``)."""

from typing import Any

from django.db import migrations

_CREATE = """
CREATE OR REPLACE FUNCTION devices_payload_reading(payload text, key text, kind text)
RETURNS double precision LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE v jsonb;
BEGIN
    v := payload::jsonb -> 'values' -> key;
    IF kind = 'number' AND jsonb_typeof(v) = 'number' THEN
        RETURN v::double precision;
    ELSIF kind = 'bool' AND jsonb_typeof(v) = 'boolean' THEN
        RETURN CASE WHEN v::boolean THEN 1.0 ELSE 0.0 END;
    END IF;
    RETURN NULL;
EXCEPTION WHEN others THEN
    RETURN NULL;
END $$
"""
_DROP = "DROP FUNCTION IF EXISTS devices_payload_reading(text, text, text)"


def forwards(apps: Any, schema_editor: Any) -> None:
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(_CREATE)


def backwards(apps: Any, schema_editor: Any) -> None:
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(_DROP)


class Migration(migrations.Migration):
    dependencies = [("devices", "0022_telemetry_fingerprint_bytes")]

    operations = [migrations.RunPython(forwards, backwards)]
