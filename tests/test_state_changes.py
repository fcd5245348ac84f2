"""Every state change goes through ``common.ledger``: an ``.update(`` call in a service is one
of the writes that are no state change, each named with its reason in docs/architecture.md
("State changes"). A new one fails until it moves onto the ledger or is named there, and a
named one that is gone fails too, so the list stays true."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# (service module, function): why its UPDATE is no state change.
EXCEPTIONS: dict[tuple[str, str], str] = {
    ("alarms/services/lifecycle.py", "_bump"): "a repeat of an open alarm: a counter",
    ("devices/services/bridge_slots.py", "bridge_slot_claim"): "a slot's lease",
    ("devices/services/bridge_slots.py", "bridge_slots_renew"): "a slot's lease",
    ("devices/services/bridge_slots.py", "bridge_slot_release"): "a slot's lease",
    ("devices/services/bridge_slots.py", "bridge_slot_beat"): "a bridge's sign of life",
    ("devices/services/bridge_slots.py", "bridge_process_beat"): "a process's sign of life",
    ("devices/services/health.py", "devices_offline_due_refresh"): "a derived column",
    ("devices/services/rollups.py", "_step"): "the rollups' watermark",
    ("devices/services/rollups.py", "_horizon_take"): "the rollups' watermark",
    ("events/services/deliver.py", "_attempt_count"): "a handler's failures: a counter",
    ("notifications/services/inbox.py", "inbox_item_mark_read"): "a read mark",
    ("reminders/services/settings.py", "reminder_setting_update"): "a configuration edit",
    ("reminders/services/sources.py", "_source_update"): "a configuration edit",
    ("reminders/services/reports/subscriptions.py", "report_subscription_update"): (
        "a configuration edit"
    ),
    ("reminders/services/user_messages/rows.py", "_move"): "a link following its row's move",
    ("scheduler/services/trace.py", "scheduler_trace_prune"): "retention of a trace blob",
}


def _updates(path: Path) -> set[str]:
    """The functions of ``path`` that call ``<something>.update(…)``."""
    found: set[str] = set()

    class Visitor(ast.NodeVisitor):
        def __init__(self) -> None:
            self.within: list[str] = []

        def visit_FunctionDef(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
            self.within.append(node.name)
            self.generic_visit(node)
            self.within.pop()

        visit_AsyncFunctionDef = visit_FunctionDef

        def visit_Call(self, node: ast.Call) -> None:
            if isinstance(node.func, ast.Attribute) and node.func.attr == "update":
                found.add(self.within[-1] if self.within else "<module>")
            self.generic_visit(node)

    Visitor().visit(ast.parse(path.read_text(), filename=str(path)))
    return found


def _calls() -> set[tuple[str, str]]:
    calls: set[tuple[str, str]] = set()
    for path in sorted(ROOT.glob("*/services/**/*.py")):
        name = path.relative_to(ROOT).as_posix()
        if name.startswith((".", "var/")):
            continue
        calls |= {(name, function) for function in _updates(path)}
    return calls


def test_every_update_in_a_service_is_the_ledgers_or_a_named_exception() -> None:
    calls = _calls()
    unnamed = sorted(calls - set(EXCEPTIONS))
    assert not unnamed, f"move these onto common.ledger, or name them as exceptions: {unnamed}"
    gone = sorted(set(EXCEPTIONS) - calls)
    assert not gone, f"no longer an .update( here; drop them from EXCEPTIONS and the docs: {gone}"


def test_docs_name_every_exception_with_its_module() -> None:
    section = (ROOT / "docs/architecture.md").read_text().split("## State changes", 1)[1]
    section = section.split("\n## ", 1)[0]
    for path, function in EXCEPTIONS:
        assert f"`{function}`" in section, f"{function} ({path}) is not named in the docs"
        assert f"`{path}`" in section, f"{path} is not named in the docs"
