"""The catalogue is generated from the registry: the committed docs/events.md must match it,
and --check catches a stale copy."""

from __future__ import annotations

import io
import subprocess
import sys
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

from events.catalog import catalog_markdown
from events.registry import registry

ROOT = Path(__file__).resolve().parents[2]
COMMITTED = ROOT / "docs" / "events.md"


def test_the_committed_catalogue_is_current() -> None:
    call_command("event_catalog", "--check", stdout=io.StringIO())


def test_the_catalogue_lists_types_versions_fields_and_handlers(
    event_registry, ping, make_handler
) -> None:
    make_handler(ping, "test.audit", versions=(1,))
    text = catalog_markdown(registry)
    assert "| [DeviceStatusChanged](#devicestatuschanged) | 1 | 0 |" in text
    assert "| [test.Ping](#test.ping) | 1 | 1 |" in text
    assert "| `expires_on` | `str \\| None` | yes |" in text
    assert "| `level` | `int` | yes | — |" in text
    assert "| `test.audit` | 1 |" in text


def test_check_fails_on_a_stale_file_and_passes_once_regenerated(
    tmp_path, event_registry, ping
) -> None:
    target = tmp_path / "events.md"
    target.write_text(COMMITTED.read_text(encoding="utf-8"), encoding="utf-8")  # lacks test.Ping
    with pytest.raises(CommandError, match="is stale"):
        call_command("event_catalog", "--check", "--output", str(target))

    call_command("event_catalog", "--output", str(target), stdout=io.StringIO())

    assert "### test.Ping" in target.read_text(encoding="utf-8")
    call_command("event_catalog", "--check", "--output", str(target), stdout=io.StringIO())


def test_check_exits_non_zero_from_the_shell(tmp_path) -> None:
    stale = tmp_path / "events.md"
    stale.write_text("# an old catalogue\n", encoding="utf-8")
    proc = subprocess.run(
        [sys.executable, "manage.py", "event_catalog", "--check", "--output", str(stale)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode != 0
    assert "is stale" in proc.stderr
