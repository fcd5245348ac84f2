"""Which farm each offered crossing goes to, and when. Pure, so the alternation that makes
every crossing a command is checked without a broker.

Crossings go round-robin over the farms; a farm's crossings alternate hot and cool (its
first one hot, the relay starting off), so each asks for the opposite of the one before
and, unless a newer one overtakes it, makes exactly one command. The global index carries
over from step to step, so the alternation holds across steps."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Crossing:
    index: int  # over the whole run
    step: int
    farm: int
    hot: bool
    offset_s: float  # from the start of its step


def step_crossings(
    *, step: int, rate: float, seconds: float, farms: int, first_index: int
) -> list[Crossing]:
    """``rate``/s crossings for ``seconds``, evenly spaced, starting at ``first_index``."""
    if rate <= 0 or seconds <= 0 or farms < 1:
        raise ValueError("rate and seconds must be > 0, farms >= 1")
    count = max(1, round(rate * seconds))
    return [
        Crossing(
            index=i,
            step=step,
            farm=i % farms,
            hot=(i // farms) % 2 == 0,
            offset_s=(i - first_index) / rate,
        )
        for i in range(first_index, first_index + count)
    ]
