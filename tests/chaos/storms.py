"""Commands per relay per wave, by fault mode, over every scenario of the run. Each wave is
one reading per farm, so a healthy relay gets at most one command per endpoint per wave and
one request per command; a storm (a relay that refuses or misreports drawing a command on
every reading, or one command re-sent again and again) stands out against the healthy rows.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from statistics import fmean
from typing import Any

STORM_HEADERS = [
    "fault mode",
    "relay-waves",
    "commands avg",
    "commands max",
    "requests avg",
    "requests max",
    "max requests in",
]


@dataclass(frozen=True)
class WaveLoad:
    """What one relay got in one wave of one scenario."""

    scenario: str
    commands: int  # command intents decided for it
    requests: int  # RPC requests it received for them (retries and re-sends included)


LOADS: dict[str, list[WaveLoad]] = {}  # by fault mode, in the order first seen


def wave_of(reading_ts: datetime, wave_starts: Sequence[datetime]) -> int:
    """The wave a reading belongs to: wave w's readings are later than ``wave_starts[w]``
    and no later than ``wave_starts[w + 1]``."""
    return max(0, bisect_left(wave_starts, reading_ts) - 1)


def wave_loads_record(
    scenario: str,
    faults: dict[str, str],
    waves: int,
    commands: Iterable[tuple[str, int, int]],
) -> None:
    """``faults``: relay serial → fault mode; ``commands``: (relay serial, wave, requests the
    relay received) per command. Waves without a command count as zero."""
    cells = {(serial, wave): [0, 0] for serial in faults for wave in range(waves)}
    for serial, wave, requests in commands:
        cell = cells[serial, min(wave, waves - 1)]
        cell[0] += 1
        cell[1] += requests
    for (serial, _), (count, requests) in cells.items():
        LOADS.setdefault(faults[serial], []).append(WaveLoad(scenario, count, requests))


def storm_rows(by_fault: dict[str, list[WaveLoad]]) -> list[tuple[Any, ...]]:
    rows: list[tuple[Any, ...]] = []
    for fault, loads in by_fault.items():
        worst = max(loads, key=lambda load: load.requests)
        rows.append(
            (
                fault,
                len(loads),
                fmean(load.commands for load in loads),
                max(load.commands for load in loads),
                fmean(load.requests for load in loads),
                worst.requests,
                worst.scenario,
            )
        )
    return rows
