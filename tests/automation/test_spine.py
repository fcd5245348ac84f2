"""The execution core's stage order (``automation.services.spine``): one function says which
stage follows what a stage committed, in which batches, and the crossing's tasks are
adapters that call one service and hand on nothing themselves."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from automation.services import spine
from automation.services.spine import Committed, Hop, hand_on, next_stages
from config.task_names import (
    COMMANDS_DISPATCH,
    COMMANDS_RECONCILE,
    EVENTS_EVALUATE,
    METRICS_TOUCHED,
)

TASKS = Path(__file__).resolve().parents[2] / "automation" / "tasks.py"
# The tasks a crossing passes through, and the sweeps that stand in for a lost hand-off.
SPINE_TASKS = {
    "telemetry_ingest_task",
    "device_messages_reconcile_task",
    "endpoint_events_evaluate_task",
    "endpoint_events_sweep_task",
    "commands_dispatch_task",
    "commands_reconcile_task",
    "commands_sweep_task",
}


@pytest.fixture
def watched(monkeypatch: pytest.MonkeyPatch) -> set[int]:
    endpoints = {7, 9}
    monkeypatch.setattr(spine, "metric_endpoints", lambda: frozenset(endpoints))
    return endpoints


def test_the_stage_order_is_evaluate_dispatch_reconcile_then_reminders(
    watched: set[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(spine.settings, "EVALUATE_BATCH_SIZE", 2)
    hops = next_stages(
        Committed(
            events=[1, 2, 3],
            commands=[10],
            commands_due=[11],
            evidence=[12, 12, 13],
            endpoints=[7, 8, 9],
        )
    )
    assert hops == [
        Hop(EVENTS_EVALUATE, [1, 2]),
        Hop(EVENTS_EVALUATE, [3]),
        Hop(COMMANDS_DISPATCH, [10]),
        Hop(COMMANDS_DISPATCH, [11], (("trust_cache", False),)),  # the database decides
        Hop(COMMANDS_RECONCILE, [12, 13]),  # a command twice in a flush: reconciled once
        Hop(METRICS_TOUCHED, [7, 9]),  # only the endpoints a threshold reminder watches
    ]


def test_nothing_committed_hands_nothing_on(watched: set[int]) -> None:
    assert next_stages(Committed()) == []
    assert next_stages(Committed(endpoints=[8])) == []  # read, but watched by nothing


def test_commands_are_dispatched_in_batches_of_the_dispatch_size() -> None:
    ids = list(range(spine.DISPATCH_BATCH_SIZE + 1))
    hops = next_stages(Committed(commands=ids))
    assert [len(h.ids) for h in hops] == [spine.DISPATCH_BATCH_SIZE, 1]
    assert [i for h in hops for i in h.ids] == ids


def test_hand_on_sends_through_the_given_sender(watched: set[int]) -> None:
    sent: list[Hop] = []
    hand_on(Committed(events=[1], evidence=[2]), send=sent.append)
    assert [h.task for h in sent] == [EVENTS_EVALUATE, COMMANDS_RECONCILE]


def test_the_crossings_tasks_are_adapters_of_one_service_call() -> None:
    """Ids in, one service call, nothing else: what follows a stage is the service's to
    hand on (through the spine), not the task's."""
    tree = ast.parse(TASKS.read_text(encoding="utf-8"))
    found: dict[str, list[ast.stmt]] = {
        node.name: [
            s
            for s in node.body
            if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))
        ]
        for node in tree.body
        if isinstance(node, ast.FunctionDef) and node.name in SPINE_TASKS
    }
    assert set(found) == SPINE_TASKS
    for name, body in found.items():
        assert len(body) == 1 and isinstance(body[0], ast.Return), name
        calls = [n for n in ast.walk(body[0]) if isinstance(n, ast.Call)]
        services = [
            c
            for c in calls
            if isinstance(c.func, ast.Name) and not c.func.id[0].isupper() and c.func.id != "len"
        ]
        assert len(services) == 1, f"{name} calls {[ast.unparse(c) for c in services]}"
