"""What each endpoint last reported, newest by device time: telemetry and state reports feed
the same two columns (``last_value``, ``last_value_at``), so evaluation compares a decision
with what the device said last, whichever message said it."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any, NamedTuple

from devices.ingest_sql import reported_values_write


class ReportedValue(NamedTuple):
    endpoint_id: int
    value: Any
    device_time: datetime


def report_value(
    reported: Mapping[str, Any], *, param_key: str, endpoint_key: str
) -> tuple[bool, Any]:
    """An endpoint's value in a state report. Firmware echoes the command's parameter name
    (the endpoint's ``rpc_param_key``); a report keyed by the endpoint's own key (the name it
    uses in telemetry) counts too. This is the one mapping between the two names."""
    for key in (param_key, endpoint_key):
        if key and key in reported:
            return True, reported[key]
    return False, None


def reported_values_newest(readings: Iterable[ReportedValue]) -> list[ReportedValue]:
    """Each endpoint's newest reading of ``readings`` (by device time; the later one of two
    at the same time)."""
    newest: dict[int, ReportedValue] = {}
    for reading in readings:
        seen = newest.get(reading.endpoint_id)
        if seen is None or reading.device_time >= seen.device_time:
            newest[reading.endpoint_id] = reading
    return list(newest.values())


def endpoint_reported_values_update(*, readings: Iterable[ReportedValue]) -> None:
    """Keep each endpoint's newest reported value (by device time): one guarded UPDATE per
    batch (``devices.ingest_sql``), so an older message arriving late never overwrites a
    newer value."""
    reported_values_write(reported_values_newest(readings))
