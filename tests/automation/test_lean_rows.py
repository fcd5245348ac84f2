"""Lean rows (issue 26): an endpoint event keeps its normalised value and a reference to the
telemetry that carried it, never a copy of the message; the unique keys are constraints that
still absorb every duplicate, with no ``varchar_pattern_ops`` copy of their indexes on
PostgreSQL; the migration does it in place and keeps every row."""

from __future__ import annotations

import json
from datetime import datetime

import pytest
from django.db import connection
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from automation.models import AutomationEndpointEvent, DeviceCommandReceipt
from automation.services.ingest import telemetry_ingest
from devices.models import Telemetry
from devices.mqtt.messages import InboundTelemetry
from tests.automation.conftest import ack, dispatch, make_intent
from tests.devices.factories import make_farm
from tests.migrating import migrate_to
from tests.unique_keys import key_absorbs_copies

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("clock_at_fixture_dates")]

TS = "2026-11-29T11:59:00Z"

# Every table whose keys this change moved into constraints, and those keys' columns.
MOVED_KEYS = {
    "automation_automationendpointevent": ["device_instance_endpoint"],
    "automation_automationcommandintent": ["idempotency_key", "device_command_id"],
    "automation_devicecommandreceipt": ["dedupe_key"],
    "automation_automationscheduler": ["scheduler_key"],
    "reminders_reminderoccurrence": ["scheduler_key"],
    "reminders_usermessageoccurrence": ["scheduler_key"],
    "accounts_apitoken": ["digest"],
}
CHANGED_TABLES = [*MOVED_KEYS, "reminders_endpointmetricsource", "reminders_remindersetting"]


def _ingest(serial: str, values: dict[str, object]) -> None:
    payload = json.dumps({"ts": TS, "values": values})
    telemetry_ingest(messages=[InboundTelemetry(serial, payload, timezone.now())])


def test_an_event_stores_its_value_and_reference_and_the_message_only_on_telemetry() -> None:
    kit = make_farm()
    kit.rule(), kit.rule(trigger_endpoint=kit.humidity)  # both endpoints read: both events
    _ingest(kit.sensor.serial_number, {"temp": 31.5, "humidity": 40})
    assert "raw_payload_snapshot" not in {f.name for f in AutomationEndpointEvent._meta.fields}
    (telemetry,) = Telemetry.objects.all()
    events = AutomationEndpointEvent.objects.select_related(
        "device_instance_endpoint__profile_endpoint"
    ).order_by("pk")
    body = json.loads(telemetry.raw_payload)
    # What the snapshot held ({key, value, ts}) is each event's own, or its telemetry's.
    seen = {
        e.device_instance_endpoint.profile_endpoint.key: (e.normalized_value, e.event_timestamp)
        for e in events
        if e.source_telemetry_id == telemetry.pk
    }
    at = parse_datetime(body["ts"])
    assert seen == {key: (value, at) for key, value in body["values"].items()}


def test_an_event_copy_is_absorbed_by_its_fixed_width_key_alone() -> None:
    """(endpoint, event time, telemetry row): another telemetry row is another event."""
    kit = make_farm()
    kit.rule()  # reads temp
    _ingest(kit.sensor.serial_number, {"temp": 31.5})
    event = AutomationEndpointEvent.objects.get()
    key_absorbs_copies(event, "source_telemetry", event.source_telemetry_id + 1000)


def test_an_intent_copy_is_absorbed_by_its_idempotency_key_and_its_command_id() -> None:
    kit = make_farm()
    kit.rule()
    intent = dispatch(make_intent(kit))
    assert intent.device_command_id
    # A retry of the original (not a second original), holding no endpoint.
    apart = {"retry_of": intent.pk, "inflight_endpoint": None}
    key_absorbs_copies(intent, "idempotency_key", "1" * 64, device_command_id=None, **apart)
    key_absorbs_copies(intent, "device_command_id", "cmd_copy", idempotency_key="2" * 64, **apart)


def test_intents_without_a_command_id_never_collide() -> None:
    kit = make_farm()
    kit.rule()
    intent = make_intent(kit)
    assert intent.device_command_id is None
    key_absorbs_copies(
        intent, "idempotency_key", "3" * 64, retry_of=intent.pk, inflight_endpoint=None
    )  # the copy with another key is inserted though both command ids are NULL


def test_a_receipt_copy_is_absorbed_by_its_dedupe_key_alone() -> None:
    kit = make_farm()
    kit.rule()
    ack(dispatch(make_intent(kit)))
    receipt = DeviceCommandReceipt.objects.order_by("pk").first()
    assert receipt is not None
    key_absorbs_copies(receipt, "dedupe_key", "4" * 64)


def _indexes(tables: list[str]) -> list[tuple[str, str, str]]:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT tablename, indexname, indexdef FROM pg_indexes WHERE tablename = ANY(%s)",
            [tables],
        )
        return list(cursor.fetchall())


@pytest.mark.postgres
def test_no_pattern_ops_copy_of_an_index_on_the_changed_tables() -> None:
    """Django builds a ``…_like`` index beside every ``unique=True``/``db_index=True``
    CharField on PostgreSQL; none is left, and each moved key has exactly one index (the
    scheduler key's is itself pattern-ops: its prefix matches read it)."""
    found = _indexes(CHANGED_TABLES)
    assert {t for t, _, _ in found} == set(CHANGED_TABLES)
    assert [name for _, name, _ in found if name.endswith("_like")] == []
    pattern_ops = sorted(name for _, name, d in found if "pattern_ops" in d)
    assert pattern_ops == ["scheduler_key_once"]
    for table, columns in MOVED_KEYS.items():
        for column in columns:
            on_key = [n for t, n, d in found if t == table and f"({column}" in d]
            assert len(on_key) == 1, (table, column, on_key)
            assert on_key[0].endswith("_once"), on_key


@pytest.mark.postgres
def test_intents_have_no_index_on_the_target_endpoint_alone() -> None:
    """The (target endpoint, status) index serves every lookup by target endpoint."""
    found = _indexes(["automation_automationcommandintent"])
    on_target = sorted(d.split(" USING btree ")[1] for _, _, d in found if "(target_device_e" in d)
    assert on_target == ["(target_device_endpoint_id, status)"]


@pytest.mark.django_db(transaction=True)
def test_the_migration_keeps_every_row_and_moves_the_keys_in_place() -> None:
    """From before the change (a snapshot on every event, keys as ``unique=True``): after
    it and the lean events that followed (0021), the same rows with their values, the keys
    as named constraints without a pattern-ops copy, and a duplicate still absorbed."""
    kit = make_farm()
    executor = migrate_to([("automation", "0010_execution_target_required")])
    old = executor.loader.project_state(("automation", "0010_execution_target_required")).apps
    at = timezone.now()
    telemetry = Telemetry.objects.create(
        device=kit.sensor, raw_payload="{}", fingerprint=b"f" * 16, message_ts=at, received_at=at
    )
    old_event = old.get_model("automation", "AutomationEndpointEvent").objects.create(
        organization_id=kit.farm.organization_id,
        farm_id=kit.farm.pk,
        device_id=kit.sensor.pk,
        device_instance_endpoint_id=kit.temp.pk,
        source_telemetry_id=telemetry.pk,
        event_timestamp=at,
        normalized_value=31.5,
        raw_payload_snapshot={"key": "temp", "value": 31.5, "ts": at.isoformat()},
        dedupe_key="k" * 64,
        created_at=at,
    )
    migrate_to()
    event = AutomationEndpointEvent.objects.get()
    assert (event.pk, event.normalized_value) == (old_event.pk, 31.5)
    assert (event.device_instance_endpoint_id, event.source_telemetry_id) == (
        kit.temp.pk,
        telemetry.pk,
    )
    assert _same_instant(event.event_timestamp, at)
    with connection.cursor() as cursor:
        table = AutomationEndpointEvent._meta.db_table
        constraints = connection.introspection.get_constraints(cursor, table)
        columns = {c.name for c in connection.introspection.get_table_description(cursor, table)}
    # The key carries the partition key since the events were partitioned (0013), and is
    # fixed-width since 0021: the hashed text key and the owners' copies are gone.
    assert constraints["event_once"]["columns"] == [
        "device_instance_endpoint_id",
        "event_timestamp",
        "source_telemetry_id",
    ]
    assert not columns & {"raw_payload_snapshot", "dedupe_key", "organization_id", "device_id"}
    key_absorbs_copies(event, "source_telemetry", telemetry.pk + 1000)


def _same_instant(a: datetime, b: datetime) -> bool:
    return abs((a - b).total_seconds()) < 1e-3
