"""Task names in one place: a stage hands work on by a task's name, beat schedules by name and
the metrics count by name, so a name written twice is a name that can drift. Every registered
task's name is written once in product code, in ``config.task_names`` for the tasks another
module sends, schedules or counts; a tasks module registers under the constant."""

from __future__ import annotations

import ast
import os
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

from config import task_names
from config.celery import app

ROOT = Path(__file__).resolve().parents[2]
SKIPPED_DIRS = {"tests", "var", "migrations", "node_modules", "__pycache__"}


def _product_files() -> Iterator[Path]:
    for folder, dirs, files in os.walk(ROOT):
        dirs[:] = sorted(d for d in dirs if d not in SKIPPED_DIRS and not d.startswith("."))
        yield from (Path(folder, name) for name in sorted(files) if name.endswith(".py"))


def _registered() -> set[str]:
    app.loader.import_default_modules()
    return {name for name in app.tasks if not name.startswith("celery.")}


def test_every_task_name_is_written_once_in_product_code() -> None:
    names = _registered()
    written: Counter[str] = Counter()
    where: dict[str, list[str]] = {}
    for path in _product_files():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Constant) and node.value in names:
                written[node.value] += 1
                where.setdefault(node.value, []).append(str(path.relative_to(ROOT)))
    assert {name: where[name] for name, count in written.items() if count > 1} == {}


def test_each_name_of_the_table_is_a_registered_task() -> None:
    table = {
        value for key, value in vars(task_names).items() if key.isupper() and isinstance(value, str)
    }
    assert table - _registered() == set()
    assert set(task_names.PREVIOUS_TASK_NAMES) - _registered() == set()
