"""How figures become the printed tables: each product figure next to its bare counterpart
as a ratio, and each figure at base and scaled sizes as a cost growth, so the reader compares
ratios (which survive a noisy machine) rather than absolutes (which do not)."""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass

from config.tables import format_table

PROGRESS_EVERY_S = 2.0  # when stderr is not a terminal, at most one progress line this often
PROGRESS_TTY_EVERY_S = 0.2


@dataclass(frozen=True)
class Figure:
    """One number of the growth table. Cost is 1/value for a rate and the value itself for a
    latency, so cost growth above 1× always means "dearer at scale"."""

    name: str
    value: float
    unit: str
    higher_is_better: bool

    @property
    def cell(self) -> float | str:
        return "-" if math.isnan(self.value) else self.value


def ratio(value: float, bare: float) -> str:
    """``value / bare`` as ``0.42×``; ``-`` when either side is missing."""
    if not bare or math.isnan(value) or math.isnan(bare):
        return "-"
    return f"{value / bare:.2f}×"


def percentile(samples: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (``q`` in 0..1); NaN without samples."""
    if not samples:
        return math.nan
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]


def growth_table(base: Sequence[Figure], scaled: Sequence[Figure], scale: int) -> str:
    """Figures present in both runs, in the base run's order, with cost growth."""
    by_name = {f.name: f for f in scaled}
    rows: list[tuple[object, ...]] = []
    for figure in base:
        other = by_name.get(figure.name)
        if other is None:
            continue
        growth = (
            ratio(figure.value, other.value)
            if figure.higher_is_better
            else ratio(other.value, figure.value)
        )
        rows.append((figure.name, figure.unit, figure.cell, other.cell, growth))
    return format_table(["figure", "unit", "base", f"{scale}×", "cost growth"], rows)


class Progress:
    """Progress of a long phase on stderr: one line rewritten a few times a second on a
    terminal, a line every few seconds when stderr goes to a file (logs stay readable);
    the final line always."""

    def __init__(self, label: str) -> None:
        self._label = label
        self._tty = sys.stderr.isatty()
        self._every_s = PROGRESS_TTY_EVERY_S if self._tty else PROGRESS_EVERY_S
        self._next_at = 0.0

    def update(self, text: str, *, final: bool = False) -> None:
        now = time.monotonic()
        if now < self._next_at and not final:
            return
        self._next_at = now + self._every_s
        line = f"{self._label}: {text}"
        if self._tty:
            sys.stderr.write("\r" + line.ljust(100) + ("\n" if final else ""))
        else:
            sys.stderr.write(line + "\n")
        sys.stderr.flush()

    def count(self, done: int, total: int, unit: str) -> None:
        self.update(f"{done:,}/{total:,} {unit}", final=done >= total)
