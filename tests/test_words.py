"""One word for a command: the ledger's model has been ``DeviceCommand`` since it stopped
being ``AutomationCommandIntent``, and no identifier of product code says "intent" any more,
but for the allow-list below, each entry with why it stays. Identifiers only (the NAME
tokens of every product Python file, migrations aside, and the names inside f-strings):
strings and comments may still name what is stored or sent under the old word (a table, a
column, a stored value, a task's previous name), which docs/architecture.md lists under
"Names kept from before the rename"."""

from __future__ import annotations

import ast
import io
import os
import tokenize
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
WORD = "intent"
# Not product code: the tests, the virtual environments, and what runs leave under var/.
SKIPPED_DIRS = {"tests", "var", "migrations", "node_modules", "__pycache__"}
# (file, identifier) -> why it keeps the old word. At most ten, and it only shrinks.
ALLOWED: dict[tuple[str, str], str] = {
    ("automation/serializers.py", "intent"): (
        "the key of a manual hold's command in API v1 answers (EndpointHoldSerializer): "
        "clients read it; the field reads the model's ``command``"
    ),
}


def _product_files() -> Iterator[Path]:
    for folder, dirs, files in os.walk(ROOT):
        dirs[:] = sorted(d for d in dirs if d not in SKIPPED_DIRS and not d.startswith("."))
        for name in sorted(files):
            if name.endswith(".py"):
                yield Path(folder, name)


def _prefix(string_token: str) -> str:
    """A string literal's prefix, lowercased (``f``, ``rf``, ``b``, …)."""
    return string_token[: len(string_token) - len(string_token.lstrip("rRbBuUfF"))].lower()


def _fstring_names(text: str) -> Iterator[str]:
    """The identifiers inside an f-string's fields (one STRING token before Python 3.12)."""
    try:
        tree = ast.parse(text, mode="eval")
    except SyntaxError:
        return
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            yield node.id
        elif isinstance(node, ast.Attribute):
            yield node.attr
        elif isinstance(node, ast.keyword) and node.arg:
            yield node.arg


def _identifiers(path: Path) -> Iterator[tuple[str, int]]:
    source = path.read_text(encoding="utf-8")
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.NAME:
            yield token.string, token.start[0]
        elif token.type == tokenize.STRING and "f" in _prefix(token.string):
            for name in _fstring_names(token.string):
                yield name, token.start[0]


def _found() -> dict[tuple[str, str], list[int]]:
    found: dict[tuple[str, str], list[int]] = {}
    for path in _product_files():
        relative = path.relative_to(ROOT).as_posix()
        for name, line in _identifiers(path):
            if WORD in name.lower():
                found.setdefault((relative, name), []).append(line)
    return found


def test_no_identifier_of_product_code_says_intent_but_the_allowed() -> None:
    unexplained = {
        f"{path}:{lines[0]} {name}"
        for (path, name), lines in _found().items()
        if (path, name) not in ALLOWED
    }
    assert sorted(unexplained) == []


def test_the_allow_list_is_tiny_and_every_entry_is_still_needed() -> None:
    assert len(ALLOWED) <= 10
    assert sorted(set(ALLOWED) - set(_found())) == []  # gone: remove it from ALLOWED


def test_the_walk_reads_product_code_and_finds_an_identifier_in_an_f_string() -> None:
    files = {p.relative_to(ROOT).as_posix() for p in _product_files()}
    assert {"manage.py", "automation/models/ledger.py", "config/task_names.py"} <= files
    assert not any(f.startswith(("tests/", ".venv")) or "/migrations/" in f for f in files)
    assert set(_fstring_names('f"held by #{hold.intent_id} ({intent!r})"')) >= {
        "intent_id",
        "intent",
    }
