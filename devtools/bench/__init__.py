"""``manage.py bench``: the product's figures on this machine, each measured in the same run
as a bare counterpart (paho alone, plain SQL), so a figure is read as a ratio to what the
broker or the database can do here rather than as an absolute that moves with the machine.

Every row a bench creates carries its run's tag and is deleted before the bench returns,
also when a measurement fails.
"""

from __future__ import annotations


class BenchError(RuntimeError):
    """A measurement could not complete (a path lost messages, timed out, or the database
    holds rows the bench would take for its own); the message says which and why."""
