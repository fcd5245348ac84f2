"""``manage.py reconcile --provider P [--farm F] [--dry-run]``: one bounded reconciliation
pass, and a table of what it repaired."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.utils import timezone

from config.tables import format_table
from reminders.providers.base import UnknownSourceType, reminder_source_types
from reminders.services.reconcile import ReconcileReport, reminder_reconcile


class Command(BaseCommand):
    help = "Run one bounded reminder reconciliation pass for a provider and print its repairs."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--provider", required=True, help="source type, e.g. document")
        parser.add_argument("--farm", type=int, action="append", help="farm id (repeatable)")
        parser.add_argument("--dry-run", action="store_true", help="show, change nothing")
        parser.add_argument("--batch", type=int, default=None, help="sources per scan")
        parser.add_argument("--window-days", type=int, default=None, help="due window N")

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            report = reminder_reconcile(
                provider=options["provider"],
                now=timezone.now(),
                farm_ids=options["farm"],
                dry_run=options["dry_run"],
                batch_size=options["batch"],
                window_days=options["window_days"],
            )
        except UnknownSourceType:
            known = ", ".join(reminder_source_types())
            raise CommandError(
                f"unknown provider {options['provider']!r} (known: {known})"
            ) from None
        self.stdout.write(_render(report))


def _render(report: ReconcileReport) -> str:
    verb = "would repair" if report.dry_run else "repaired"
    head = (
        f"{report.provider} [{report.scope}] window today..+{report.window_days}d: "
        f"visited {report.visited_changed} changed, {report.visited_window} in window; "
        f"{verb} {len(report.repairs)}"
    )
    if not report.repairs:
        return head
    rows = [
        (r.scan, r.farm_id or "", r.source_guid[:8], r.action, r.reason or "-", r.scheduler_key)
        for r in report.repairs
    ]
    table = format_table(("scan", "farm", "source", "action", "reason", "scheduler key"), rows)
    return f"{head}\n{table}"
