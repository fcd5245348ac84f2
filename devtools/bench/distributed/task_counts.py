"""How many Celery tasks a crossing costs, by task name: the workers' own counters of tasks
they ran (``inspect().stats()``, its ``total``), read before a step and after it settled.
The design allows three per crossing (evaluate, dispatch, reconcile); every further hop is
about twenty broker commands and a worker's wake-up, which is why the count is a target and
not a detail. Beat's sweeps run in the same window: they are counted apart, as background."""

from __future__ import annotations

import contextlib
from collections import Counter
from collections.abc import Mapping, Sequence

from config.celery import app as celery_app
from config.tables import format_table
from config.task_names import (
    COMMANDS_DISPATCH,
    COMMANDS_RECONCILE,
    DEVICE_MESSAGES_RECONCILE,
    EVENTS_EVALUATE,
    METRICS_TOUCHED,
    TELEMETRY_INGEST,
)

# The tasks on a crossing's way, in its order; a deployment of today sends only the first
# three (an older bridge sent the last two).
CROSSING_TASKS = (
    EVENTS_EVALUATE,
    COMMANDS_DISPATCH,
    COMMANDS_RECONCILE,
    METRICS_TOUCHED,
    TELEMETRY_INGEST,
    DEVICE_MESSAGES_RECONCILE,
)
INSPECT_TIMEOUT_S = 2.0
BACKGROUND = "background (beat's sweeps, polls)"


def tasks_run() -> Counter[str] | None:
    """Tasks run so far by every worker that answers, by name; None when none answered."""
    replies: Mapping[str, Mapping[str, object]] | None = None
    with contextlib.suppress(Exception):  # a broker that does not answer: not measured
        replies = celery_app.control.inspect(timeout=INSPECT_TIMEOUT_S).stats()
    if not replies:
        return None
    total: Counter[str] = Counter()
    for stats in replies.values():
        counted = stats.get("total")
        if isinstance(counted, Mapping):
            total.update({str(name): int(n) for name, n in counted.items()})
    return total


def tasks_between(before: Counter[str] | None, after: Counter[str] | None) -> dict[str, int]:
    """The tasks run between two readings; empty when either is missing."""
    if before is None or after is None:
        return {}
    return {name: n for name, n in (after - before).items() if n > 0}


def per_crossing(tasks: Mapping[str, int], crossings: int) -> dict[str, float]:
    """Each crossing task per crossing, and the rest summed as background."""
    n = max(1, crossings)
    out = {name: tasks.get(name, 0) / n for name in CROSSING_TASKS if tasks.get(name)}
    background = sum(v for name, v in tasks.items() if name not in CROSSING_TASKS)
    out[BACKGROUND] = background / n
    return out


def crossing_tasks(tasks: Mapping[str, int], crossings: int) -> float:
    """The crossing's own tasks per crossing (the target's figure)."""
    return sum(tasks.get(name, 0) for name in CROSSING_TASKS) / max(1, crossings)


def task_counts_table(steps: Sequence[tuple[float, Mapping[str, int], int]]) -> str:
    """A row per task name, a column per step (rate, tasks by name, commands created): each
    figure per command created."""
    measured = [(rate, per_crossing(tasks, n)) for rate, tasks, n in steps if tasks]
    names = [
        *(name for name in CROSSING_TASKS if any(name in per for _, per in measured)),
        BACKGROUND,
    ]
    headers = ["task", *(f"{rate:g}/s" for rate, _ in measured)]
    rows: list[list[object]] = [
        [name, *(f"{per.get(name, 0.0):.2f}" for _, per in measured)] for name in names
    ]
    rows.append(["crossing tasks", *(f"{crossing_tasks(t, n):.2f}" for _, t, n in steps if t)])
    return format_table(headers, rows)
