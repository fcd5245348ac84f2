"""Endpoint readings read back from the telemetry that carried them.

A stored telemetry row is the message as the device sent it, and it is the one copy of a
reading: ingest writes an endpoint event only for a value that a rule, a threshold reminder
or a watchdog reads (``automation.services.ingest``). Series, the device chart, a metric and
a command's evidence therefore read values out of the stored message, by the endpoint's key.

A stored message is JSON that Python parsed, which PostgreSQL's ``jsonb`` may still refuse
(``NaN``, a lone surrogate escape, a number past a double): the SQL reading goes through
``devices_payload_reading`` (migration 0023), which answers NULL for such a message instead
of failing the whole read, and SQLite's path checks ``json_valid`` first. A value of the
wrong type for its endpoint was refused at ingest, so it is not a reading here either.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from datetime import datetime
from typing import Any, NamedTuple

from django.db import NotSupportedError
from django.db.models import F, FloatField, Func
from django.db.models.sql.compiler import SQLCompiler

from devices.models import EndpointDataType, Telemetry
from devices.values import value_has_type

# The SQL readings: a number as itself, a boolean as 0/1 (``kind`` "bool").
_KINDS: dict[str, str] = {EndpointDataType.NUMBER: "number", EndpointDataType.BOOL: "bool"}


class PayloadReading(Func):
    """One key of a stored message's ``values`` as a number, NULL when the message has no
    such value of the endpoint's type: numbers for a number endpoint, booleans as 0/1 for a
    boolean one."""

    output_field = FloatField()

    def __init__(self, key: str, data_type: str) -> None:
        if data_type not in _KINDS:
            raise ValueError(f"{data_type} endpoints have no numeric reading")
        super().__init__(F("raw_payload"))
        self.key = key
        self.kind = _KINDS[data_type]

    def as_sql(self, *args: Any, **kwargs: Any) -> Any:
        raise NotSupportedError("PayloadReading is written for PostgreSQL and SQLite")

    def as_postgresql(self, compiler: SQLCompiler, connection: Any, **extra: Any) -> Any:
        sql, params = compiler.compile(self.source_expressions[0])
        return f"devices_payload_reading({sql}, %s, %s)", [*params, self.key, self.kind]

    def as_sqlite(self, compiler: SQLCompiler, connection: Any, **extra: Any) -> Any:
        p, params = compiler.compile(self.source_expressions[0])
        path = "$.values." + json.dumps(self.key)
        typed = f"json_type({p}, %s)"
        if self.kind == "number":
            cases = f"WHEN 'integer' THEN CAST(json_extract({p}, %s) AS REAL) "
            cases += f"WHEN 'real' THEN json_extract({p}, %s)"
            case_params = [*params, path, *params, path]
        else:
            cases = "WHEN 'true' THEN 1.0 WHEN 'false' THEN 0.0"
            case_params = []
        sql = f"CASE WHEN json_valid({p}) THEN CASE {typed} {cases} END END"
        return sql, [*params, *params, path, *case_params]


def numeric_readings(
    *, device_id: int, key: str, data_type: str, start: datetime | None, end: datetime
) -> Any:
    """The device's messages in [``start``, ``end``) holding a numeric reading of ``key``,
    each annotated ``v``; read through the (device, message_ts) key. A telemetry queryset,
    typed ``Any`` because the checker cannot follow ``v`` out of this function."""
    rows = Telemetry.objects.filter(device_id=device_id, message_ts__lt=end)
    if start is not None:
        rows = rows.filter(message_ts__gte=start)
    return rows.annotate(v=PayloadReading(key, data_type)).filter(v__isnull=False)


def payload_values(raw_payload: str) -> dict[str, Any]:
    """A stored message's ``values`` (ingest stored only messages that have the object)."""
    try:
        values = json.loads(raw_payload).get("values")
    except (ValueError, AttributeError):
        return {}
    return values if isinstance(values, dict) else {}


class Reading(NamedTuple):
    telemetry_id: int
    device_id: int
    at: datetime  # the device's time
    received_at: datetime
    key: str
    value: Any


def device_readings(
    *,
    device_ids: Iterable[int],
    types: dict[tuple[int, str], str],
    start: datetime,
    end: datetime,
    received_since: datetime | None = None,
) -> Iterator[Reading]:
    """The readings of the ``types`` endpoints ((device id, key) → data type) that the
    devices sent with a device time in [``start``, ``end``] (and, if given, received since
    ``received_since``), oldest first, in one streamed query."""
    rows = Telemetry.objects.filter(
        device_id__in=sorted(set(device_ids)), message_ts__gte=start, message_ts__lte=end
    )
    if received_since is not None:
        rows = rows.filter(received_at__gte=received_since)
    fields = ("pk", "device_id", "message_ts", "received_at", "raw_payload")
    yield from typed_readings(
        rows.order_by("message_ts", "pk").values_list(*fields).iterator(chunk_size=2000), types
    )


TelemetryRow = tuple[int, int, datetime, datetime, Any]  # id, device, device time, received, raw


def typed_readings(
    rows: Iterable[TelemetryRow], types: dict[tuple[int, str], str]
) -> Iterator[Reading]:
    """The values of ``rows`` that belong to the ``types`` endpoints ((device id, key) → data
    type) and have their type, whichever way the rows were read (the ORM here, hand-written
    SQL on the hot path)."""
    for pk, device_id, at, received_at, raw in rows:
        for key, value in payload_values(raw).items():
            data_type = types.get((device_id, key))
            if data_type is not None and _typed(data_type, value):
                yield Reading(pk, device_id, at, received_at, key, value)


def _typed(data_type: str, value: Any) -> bool:
    try:
        return value_has_type(data_type, value)
    except OverflowError:
        return False
