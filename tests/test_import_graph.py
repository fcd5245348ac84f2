"""The import graph, read from the source (nothing is imported): no import cycle between
modules at import time, and dependencies between apps that point one way, but for the
back-edges listed here with the reason each still exists (docs/architecture.md draws the
order). A new back-edge fails; so does a listed one that is gone, so the list only shrinks.
No service imports a tasks module, not even inside a function."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# The intended order (docs/architecture.md): an app imports only apps of a lower layer, or
# of its own layer without a cycle.
LAYERS = {"config": 0, "common": 0, "events": 1, "devices": 2, "scheduler": 2}
LAYERS |= {"automation": 3, "alarms": 3, "reminders": 4, "notifications": 4, "rollouts": 4}
LAYERS |= {"devtools": 5}
APPS = tuple(LAYERS)

# (importer, imported): app-level edges against the order today, each with why.
KNOWN_BACK_EDGES: dict[tuple[str, str], str] = {}


def _modules() -> dict[str, Path]:
    found = {}
    for app in APPS:
        for path in (ROOT / app).rglob("*.py"):
            if "migrations" in path.parts:
                continue
            parts = path.relative_to(ROOT).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            found[name] = path
    return found


def _imports(tree: ast.AST, *, top_level_only: bool) -> Iterator[tuple[str, bool]]:
    """(imported module, inside a function) for every import; names imported from a
    module count as possible submodules."""

    def visit(node: ast.AST, in_function: bool) -> Iterator[tuple[str, bool]]:
        for child in ast.iter_child_nodes(node):
            nested = in_function or isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef)
            if top_level_only and nested:
                continue
            if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                continue
            if isinstance(child, ast.Import):
                yield from ((alias.name, nested) for alias in child.names)
            elif isinstance(child, ast.ImportFrom) and child.level == 0 and child.module:
                yield child.module, nested
                yield from ((f"{child.module}.{a.name}", nested) for a in child.names)
            yield from visit(child, nested)

    return visit(tree, False)


def _resolve(name: str, modules: dict[str, Path]) -> str | None:
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


def _cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one node (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in edges:
        if root in index:
            continue
        work = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_no_import_cycle_between_modules_at_import_time() -> None:
    modules = _modules()
    edges: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        for imported, _ in _imports(ast.parse(path.read_text()), top_level_only=True):
            target = _resolve(imported, modules)
            if target is not None and target != name and not name.startswith(f"{target}."):
                edges[name].add(target)
    assert _cycles(edges) == []


def test_no_module_imports_the_package_it_belongs_to() -> None:
    """A package's ``__init__`` imports its modules to re-export them, so a module importing
    a name from its own package's ``__init__`` is a cycle too (the test above skips the edge
    from a module to the packages above it)."""
    modules = _modules()
    re_exporting = {
        package
        for package, path in modules.items()
        if path.name == "__init__.py"
        and any(
            imported.startswith(f"{package}.")
            for imported, _ in _imports(ast.parse(path.read_text()), top_level_only=True)
        )
    }
    found = []
    for name, path in modules.items():
        for node in ast.parse(path.read_text()).body:
            if not isinstance(node, ast.ImportFrom) or node.level or not node.module:
                continue
            package = node.module
            if name.startswith(f"{package}.") and package in re_exporting:
                names = [a.name for a in node.names if f"{package}.{a.name}" not in modules]
                found += [f"{name} imports {package}.{n}" for n in names]
    assert found == []


def test_apps_depend_on_each_other_one_way_but_for_the_known_back_edges() -> None:
    modules = _modules()
    edges: dict[str, set[str]] = {app: set() for app in APPS}
    for name, path in modules.items():
        app = name.partition(".")[0]
        for imported, _ in _imports(ast.parse(path.read_text()), top_level_only=False):
            target = imported.partition(".")[0]
            if target not in APPS or target == app:
                continue
            edges[app].add(target)
    back = {(app, target) for app in APPS for target in edges[app] if LAYERS[target] > LAYERS[app]}
    unexplained = back - set(KNOWN_BACK_EDGES)
    assert not unexplained, f"new imports against the app order: {sorted(unexplained)}"
    fixed = set(KNOWN_BACK_EDGES) - back
    assert not fixed, f"back-edges gone: remove them from KNOWN_BACK_EDGES: {sorted(fixed)}"
    forward = {app: {t for t in targets if (app, t) not in back} for app, targets in edges.items()}
    assert _cycles(forward) == []  # apps of one layer do not depend on each other both ways


def test_no_service_module_imports_a_tasks_module_even_inside_a_function() -> None:
    """Services hand work on through ``common.handoff`` (a task by its name, after commit):
    a tasks module imports its services, never the other way round."""
    found = []
    for name, path in _modules().items():
        if ".services" not in name:
            continue
        for imported, _ in _imports(ast.parse(path.read_text()), top_level_only=False):
            if imported.endswith(".tasks") or ".tasks." in imported:
                found.append(f"{name} imports {imported}")
    assert found == []


# Where a hand-off may be sent or wait for a commit besides ``common.handoff``, each with why.
HANDOFF_EXCEPTIONS: set[tuple[str, str]] = set()


def test_only_the_handoff_module_waits_for_a_commit_or_sends_by_name() -> None:
    """A stage hands on through ``common.handoff`` (``after_commit``, robust): no product
    module but it calls ``on_commit`` or ``send_task``; a tasks module, an adapter, may queue
    its own next task."""
    found = set()
    for name, path in _modules().items():
        if name == "common.handoff" or name.startswith("devtools"):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr in {"on_commit", "send_task"}
            ):
                found.add((name, node.func.attr))
    assert found == HANDOFF_EXCEPTIONS


# The product modules that look a model up by its label, each with why. None of them is an
# app reading the models of an app above it around the layers.
MODEL_BY_LABEL: dict[str, str] = {
    "common.partitions": "migration operations: the historical models a migration is given",
    "common.model_renames": "a migration operation: Django's own content types and permissions",
    "common.roles": "Django's own groups and permissions, in a migration",
    "common.retention": "the one table of every append-only table's retention, by label",
    "common.audit.registry": "the one table of what the audit log follows, by label",
}


def test_no_app_reads_another_by_a_model_label_around_the_layers() -> None:
    """An app that needs what an app above it knows asks through a hook that app registers
    (``automation.services.rule_cache.metric_readers_register``), not ``apps.get_model``: a
    model looked up by its label is an import the layers cannot see."""
    found = {}
    for name, path in _modules().items():
        if name.startswith("devtools"):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr == "get_model"
            ):
                found[name] = MODEL_BY_LABEL.get(name, "not listed")
    assert found == MODEL_BY_LABEL
