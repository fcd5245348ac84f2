"""Lean endpoint events: the key is (endpoint, event time, telemetry row), 24 fixed-width
bytes in place of a 64-character hash, and it serves an endpoint's readings over a time
window, so the separate (endpoint, event time) index goes; the organisation, farm and device
copies go (the endpoint gives all three). No row is rewritten: on PostgreSQL a dropped
column is metadata only, and the one index built reads each row once (docs/benchmarks.md,
"Storage per stored value", gives its time per million rows). The new key is added before
the old one goes, so no moment of the migration takes a duplicate.

Going back fills the dropped columns again: the copies from the endpoint, and the text key
as a hash that names the endpoint and the telemetry row, unique as the new key is (the
release before hashes other words into it, so its new keys never meet these)."""

from typing import Any

import django.db.models.deletion
from django.db import migrations, models

_COPIES = ("organization", "farm", "device")


def _refill(apps: Any, schema_editor: Any) -> None:
    """The dropped columns of every row, from its endpoint and telemetry row."""
    run = schema_editor.execute
    events = "automation_automationendpointevent"
    owners = (
        "SELECT e.id AS endpoint, d.id AS device, f.id AS farm, f.organization_id AS org "
        "FROM devices_deviceinstanceendpoint e JOIN devices_device d ON d.id = e.device_id "
        "JOIN devices_farm f ON f.id = d.farm_id"
    )
    run(
        f"UPDATE {events} SET organization_id = o.org, farm_id = o.farm, device_id = o.device "
        f"FROM ({owners}) o WHERE o.endpoint = {events}.device_instance_endpoint_id"
    )
    words = "'event:' || device_instance_endpoint_id || ':' || source_telemetry_id"
    if schema_editor.connection.vendor == "postgresql":
        run(f"UPDATE {events} SET dedupe_key = encode(sha256(convert_to({words}, 'UTF8')), 'hex')")
        # The updates queued the endpoint key's deferred checks; the ALTERs after them in
        # this transaction refuse a table with checks pending, so they run now.
        run("SET CONSTRAINTS ALL IMMEDIATE")
    else:  # SQLite has no SHA-256: the words themselves are as unique, and fit in 64
        run(f"UPDATE {events} SET dedupe_key = {words}")


def _nullable(name: str, model: str) -> Any:
    if name == "dedupe_key":
        field: Any = models.CharField(max_length=64, null=True)
    else:
        field = models.ForeignKey(
            db_constraint=False,
            db_index=False,
            null=True,
            on_delete=django.db.models.deletion.DO_NOTHING,
            to=model,
        )
    return migrations.AlterField(model_name="automationendpointevent", name=name, field=field)


class Migration(migrations.Migration):
    dependencies = [
        ("automation", "0020_watchdog_rules_index"),
        ("devices", "0023_payload_reading"),
    ]

    operations = [
        migrations.AddConstraint(
            model_name="automationendpointevent",
            constraint=models.UniqueConstraint(
                fields=("device_instance_endpoint", "event_timestamp", "source_telemetry"),
                name="event_once",
            ),
        ),
        migrations.RemoveConstraint(model_name="automationendpointevent", name="event_dedupe_once"),
        migrations.RemoveIndex(
            model_name="automationendpointevent", name="automation__device__34bd7f_idx"
        ),
        # Nullable first, so that going back can add them empty and fill them (_refill).
        _nullable("organization", "common.organization"),
        _nullable("farm", "devices.farm"),
        _nullable("device", "devices.device"),
        _nullable("dedupe_key", ""),
        migrations.RunPython(migrations.RunPython.noop, _refill),
        migrations.RemoveField(model_name="automationendpointevent", name="dedupe_key"),
        *(
            migrations.RemoveField(model_name="automationendpointevent", name=name)
            for name in _COPIES
        ),
    ]
