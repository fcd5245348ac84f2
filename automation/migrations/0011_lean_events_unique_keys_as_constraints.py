"""Lean rows (issue 26): the endpoint event no longer copies its telemetry's payload
(``raw_payload_snapshot``: the key is the endpoint's, the value and the device time are the
event's own columns, the message stays on the telemetry row, so no data needs copying);
unique keys become constraints without the ``varchar_pattern_ops`` copy Django builds beside
a ``unique=True`` CharField; and two indexes no query reads go (receipts by correlation key,
intents by target endpoint alone, which the (endpoint, status) index serves).

On PostgreSQL the keys change in place: the existing unique constraint is renamed and its
pattern-ops copy dropped, so the unique index of a large table is not rebuilt under lock, and
the foreign key whose index goes is not re-validated. Elsewhere Django's own operations run.
"""

from collections.abc import Callable, Sequence
from typing import Any

import django.db.models.deletion
from django.db import migrations, models
from django.db.migrations.operations.base import Operation

Postgres = Callable[[Any, Any, Any], None]  # (schema editor, model, field) -> None


def _indexes_on(schema_editor: Any, model: Any, column: str) -> dict[str, dict[str, Any]]:
    with schema_editor.connection.cursor() as cursor:
        found = schema_editor.connection.introspection.get_constraints(
            cursor, model._meta.db_table
        )
    return {name: c for name, c in found.items() if c["columns"] == [column]}


def _one(names: Sequence[str], what: str, model: Any) -> str:
    if len(names) != 1:
        raise RuntimeError(f"{model._meta.db_table}: expected one {what}, found {sorted(names)}")
    return names[0]


def _key_renamed(name: str) -> Postgres:
    """The field's unique constraint becomes ``name``; its ``…_like`` index is dropped."""

    def run(schema_editor: Any, model: Any, field: Any) -> None:
        on_column = _indexes_on(schema_editor, model, field.column)
        unique = [n for n, c in on_column.items() if c["unique"] and not c["primary_key"]]
        like = [n for n, c in on_column.items() if n.endswith("_like") and not c["unique"]]
        table = schema_editor.quote_name(model._meta.db_table)
        old = schema_editor.quote_name(_one(unique, "unique constraint", model))
        schema_editor.execute(
            f"ALTER TABLE {table} RENAME CONSTRAINT {old} TO {schema_editor.quote_name(name)}"
        )
        for index in like:
            schema_editor.execute(f"DROP INDEX {schema_editor.quote_name(index)}")

    return run


def _plain_index_dropped(schema_editor: Any, model: Any, field: Any) -> None:
    """Drop the foreign key's own index, keeping the constraint (nothing to re-validate)."""
    on_column = _indexes_on(schema_editor, model, field.column)
    plain = [n for n, c in on_column.items() if c["index"] and not c["unique"]]
    index = _one(plain, "index of its own", model)
    schema_editor.execute(f"DROP INDEX {schema_editor.quote_name(index)}")


class InPlaceOnPostgres(Operation):
    """``operations`` (one model's field), except that on PostgreSQL ``postgres`` makes the
    same schema change in place. Reversed, Django's own operations run on every database."""

    reversible = True

    def __init__(self, operations: list[Operation], postgres: Postgres) -> None:
        self.operations = operations
        self.postgres = postgres

    def _plain(self) -> migrations.SeparateDatabaseAndState:
        return migrations.SeparateDatabaseAndState(database_operations=self.operations)

    def state_forwards(self, app_label: str, state: Any) -> None:
        for operation in self.operations:
            operation.state_forwards(app_label, state)

    def database_forwards(
        self, app_label: str, schema_editor: Any, from_state: Any, to_state: Any
    ) -> None:
        if schema_editor.connection.vendor != "postgresql":
            self._plain().database_forwards(app_label, schema_editor, from_state, to_state)
            return
        first = self.operations[0]
        model = to_state.apps.get_model(app_label, first.model_name)
        self.postgres(schema_editor, model, model._meta.get_field(first.name))

    def database_backwards(
        self, app_label: str, schema_editor: Any, from_state: Any, to_state: Any
    ) -> None:
        self._plain().database_backwards(app_label, schema_editor, from_state, to_state)

    def describe(self) -> str:
        return "; ".join(o.describe() for o in self.operations) + " (in place on PostgreSQL)"


def _key_to_constraint(model_name: str, field_name: str, name: str, **field: Any) -> Operation:
    return InPlaceOnPostgres(
        [
            migrations.AlterField(
                model_name=model_name, name=field_name, field=models.CharField(**field)
            ),
            migrations.AddConstraint(
                model_name=model_name,
                constraint=models.UniqueConstraint(fields=(field_name,), name=name),
            ),
        ],
        _key_renamed(name),
    )


class Migration(migrations.Migration):
    dependencies = [
        ("automation", "0010_execution_target_required"),
    ]

    operations = [
        migrations.RemoveIndex(
            model_name="devicecommandreceipt",
            name="automation__correla_31d07f_idx",
        ),
        migrations.RemoveField(
            model_name="automationendpointevent",
            name="raw_payload_snapshot",
        ),
        InPlaceOnPostgres(
            [
                migrations.AlterField(
                    model_name="automationcommandintent",
                    name="target_device_endpoint",
                    field=models.ForeignKey(
                        db_index=False,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="intents",
                        to="devices.deviceinstanceendpoint",
                    ),
                )
            ],
            _plain_index_dropped,
        ),
        _key_to_constraint(
            "automationcommandintent",
            "device_command_id",
            "intent_command_id_once",
            blank=True,
            max_length=40,
            null=True,
        ),
        _key_to_constraint(
            "automationcommandintent", "idempotency_key", "intent_idempotency_once", max_length=64
        ),
        _key_to_constraint(
            "automationendpointevent", "dedupe_key", "event_dedupe_once", max_length=64
        ),
        _key_to_constraint(
            "devicecommandreceipt", "dedupe_key", "receipt_dedupe_once", max_length=64
        ),
    ]
