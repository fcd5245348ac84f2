"""Write the event catalogue (types, versions, payload fields, handlers) from the registry."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from events.catalog import catalog_markdown
from events.registry import registry


class Command(BaseCommand):
    help = "Write docs/events.md from the event registry; --check fails when it is stale."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--output",
            type=Path,
            default=Path(settings.BASE_DIR) / "docs" / "events.md",
            help="where the catalogue lives (default: docs/events.md)",
        )
        parser.add_argument(
            "--check", action="store_true", help="write nothing; exit non-zero when stale"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        path: Path = options["output"]
        wanted = catalog_markdown(registry)
        current = path.read_text(encoding="utf-8") if path.exists() else None
        if options["check"]:
            if current != wanted:
                raise CommandError(
                    f"{path} is stale: run `manage.py event_catalog` and commit the result"
                )
            self.stdout.write(f"{path} is up to date")
            return
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(wanted, encoding="utf-8")
        self.stdout.write(f"wrote {path} ({len(registry.types())} event types)")
