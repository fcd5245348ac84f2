"""The chaos tables at the end of a run. A scenario's rows travel on its test report (as user
properties), so they reach the process that prints the summary: the run itself, or under
pytest-xdist the controller, where no chaos test ran."""

from __future__ import annotations

from typing import Any

import pytest

from config.tables import format_table
from tests.chaos.storms import LOADS, STORM_HEADERS, WaveLoad, storm_rows

SUMMARY: list[tuple[Any, ...]] = []  # a scenario's line, appended by the test that ran it
SUMMARY_HEADERS = [
    "scenario",
    "readings",
    "commands",
    "applied",
    "retried",
    "uncertain",
    "superseded",
    "failed/expired",
    "reminders sent",
    "lost",
    "duplicated",
    "seconds",
]
SCENARIOS_PROPERTY = "chaos-scenarios"
LOADS_PROPERTY = "chaos-wave-loads"
# What reached this process's reports: kept apart from SUMMARY and LOADS, which the tests of
# this process fill and ``rows_attach`` empties.
_PRINTED: list[tuple[Any, ...]] = []
_PRINTED_LOADS: dict[str, list[WaveLoad]] = {}


def _plain(value: object) -> object:
    """What pytest-xdist can send between processes: a number, or its text (a fault mode is
    a ``StrEnum``)."""
    return value if isinstance(value, int | float) else str(value)


def rows_attach(report: pytest.TestReport) -> None:
    """Move what the test just recorded onto its report (the worker's side)."""
    if SUMMARY:
        rows = [[_plain(cell) for cell in row] for row in SUMMARY]
        report.user_properties.append((SCENARIOS_PROPERTY, rows))
        SUMMARY.clear()
    loads = [
        [str(fault), str(load.scenario), load.commands, load.requests]
        for fault, rows in LOADS.items()
        for load in rows
    ]
    if loads:
        report.user_properties.append((LOADS_PROPERTY, loads))
        LOADS.clear()


def rows_collect(report: pytest.TestReport) -> None:
    """Take the rows a report carries (the printing side)."""
    for name, value in report.user_properties:
        if name == SCENARIOS_PROPERTY:
            _PRINTED.extend(tuple(row) for row in value)
        elif name == LOADS_PROPERTY:
            for fault, scenario, commands, requests in value:
                _PRINTED_LOADS.setdefault(fault, []).append(WaveLoad(scenario, commands, requests))


def tables_print(terminalreporter: Any) -> None:
    if _PRINTED:
        terminalreporter.write_sep("=", "chaos scenarios")
        terminalreporter.write_line(format_table(SUMMARY_HEADERS, _PRINTED))
    if _PRINTED_LOADS:
        terminalreporter.write_sep("=", "commands per relay per wave, by fault mode")
        terminalreporter.write_line(format_table(STORM_HEADERS, storm_rows(_PRINTED_LOADS)))
