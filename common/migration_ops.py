"""A migration operation that changes the schema everywhere but on PostgreSQL, where a
later step of the same migration builds the table whole (``common.partitions``): altering
the old table first would build indexes only to drop them."""

from __future__ import annotations

from typing import Any

from django.db.migrations.operations.base import Operation


class UnlessPostgres(Operation):
    """``operation`` in the migration state always, in the database unless PostgreSQL."""

    reduces_to_sql = False

    def __init__(self, operation: Operation) -> None:
        self.operation = operation

    def deconstruct(self) -> tuple[str, list[Any], dict[str, Any]]:
        return (self.__class__.__qualname__, [self.operation], {})

    def state_forwards(self, app_label: str, state: Any) -> None:
        self.operation.state_forwards(app_label, state)

    def database_forwards(
        self, app_label: str, schema_editor: Any, from_state: Any, to_state: Any
    ) -> None:
        if schema_editor.connection.vendor != "postgresql":
            self.operation.database_forwards(app_label, schema_editor, from_state, to_state)

    def database_backwards(
        self, app_label: str, schema_editor: Any, from_state: Any, to_state: Any
    ) -> None:
        if schema_editor.connection.vendor != "postgresql":
            self.operation.database_backwards(app_label, schema_editor, from_state, to_state)

    def describe(self) -> str:
        return f"{self.operation.describe()} (PostgreSQL: built with the partitioned table)"
