"""Where each profiled process spends its samples, from py-spy's raw (collapsed) output:
one row per process, the share of samples per kind of work. The flame graphs show the
detail; this table is what a README can quote."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from pathlib import Path

from config.tables import format_table

# (kind, substrings of a frame's file path); the first kind a stack touches wins, so a
# stack inside psycopg called from the ORM counts as the database, not the ORM.
KINDS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("connect", ("get_new_connection", "psycopg/connection.py:connect")),
    ("PostgreSQL I/O", ("psycopg/",)),
    ("Celery broker", ("kombu/", "redis/", "amqp/")),
    ("MQTT", ("paho/",)),
    ("ORM and SQL compile", ("django/db/",)),
    ("JSON", ("json/",)),
    ("product code", ("automation/", "devices/", "common/", "scheduler/", "reminders/")),
    ("Celery worker", ("celery/", "billiard/")),
)
OTHER = "other"


def stack_kind(stack: str) -> str:
    for kind, needles in KINDS:
        if any(needle in stack for needle in needles):
            return kind
    return OTHER


def profile_shares(lines: Sequence[str]) -> tuple[int, Counter[str]]:
    """(samples, samples per kind) of one py-spy raw file's lines: ``frames count``."""
    shares: Counter[str] = Counter()
    total = 0
    for line in lines:
        stack, _, count = line.rstrip().rpartition(" ")
        if not stack or not count.isdigit():
            continue
        total += int(count)
        shares[stack_kind(stack)] += int(count)
    return total, shares


def profiles_table(paths: Sequence[Path]) -> str:
    kinds = [kind for kind, _ in KINDS] + [OTHER]
    rows = []
    for path in paths:
        total, shares = profile_shares(path.read_text(errors="replace").splitlines())
        if total:
            name = path.name.split(".")[0]
            rows.append((name, total, *(f"{100 * shares[k] / total:.0f} %" for k in kinds)))
    return format_table(("process", "samples", *kinds), rows)
