"""The README is the front door and lies outside the docs site, so `make docs` does not check
it: it stays within 250 lines, and every link it has into the repository resolves, a heading
anchor included, as GitHub renders it."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
README_MAX_LINES = 250
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
HEADING = re.compile(r"^#{1,6}\s+(.+?)\s*$", re.MULTILINE)


def _readme_links() -> list[str]:
    return [
        target
        for target in LINK.findall(README.read_text(encoding="utf-8"))
        if not target.startswith(("http://", "https://", "mailto:"))
    ]


def _anchors(page: Path) -> set[str]:
    """Heading anchors as GitHub makes them: lower case, punctuation dropped, spaces to '-'."""
    return {
        re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-")
        for heading in HEADING.findall(page.read_text(encoding="utf-8"))
    }


def test_the_readme_fits_the_front_door() -> None:
    lines = len(README.read_text(encoding="utf-8").splitlines())
    assert lines <= README_MAX_LINES, f"README.md has {lines} lines; move the depth to docs/"


def test_the_readme_links_into_the_docs() -> None:
    assert "docs/index.md" in _readme_links()


@pytest.mark.parametrize("target", _readme_links())
def test_each_readme_link_resolves(target: str) -> None:
    path, _, anchor = target.partition("#")
    page = (ROOT / path) if path else README
    assert page.is_file(), f"README.md links to {path}, which does not exist"
    if anchor:
        assert anchor in _anchors(page), f"{path} has no heading with the anchor #{anchor}"
