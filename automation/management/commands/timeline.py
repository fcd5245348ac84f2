"""Print the timeline of a device command or a rule execution (docs/spec.md §9)."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from automation.diagnostics import TimelineNotFound, timeline_lookup
from automation.services.latency import HOPS, TOTALS, command_stage_times
from config.tables import format_table


class Command(BaseCommand):
    help = (
        "Timeline of a command or execution: `cmd_<ULID>` (deviceCommandId), `command:<id>`, "
        "`execution:<id>` or a bare execution id."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("ref", help="cmd_…, command:<id>, execution:<id> or <executionId>")

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            timeline = timeline_lookup(ref=options["ref"])
        except TimelineNotFound as exc:
            raise CommandError(str(exc)) from None
        self.stdout.write(timeline.subject)
        self.stdout.write(
            "  ".join(f"{k}={v}" for k, v in timeline.ids.items() if v not in (None, ""))
        )
        self.stdout.write("")
        rows = [
            (
                e.at.strftime("%Y-%m-%d %H:%M:%S.%f")[:-3],
                e.stage,
                "" if e.attempt is None else str(e.attempt),
                e.what,
                e.reason,
                e.detail,
            )
            for e in timeline.entries
        ]
        self.stdout.write(
            format_table(("at (UTC)", "stage", "try", "what", "reason", "detail"), rows)
        )
        command_id = timeline.ids.get("commandIntentId")
        times = (
            command_stage_times(command_ids=[command_id]).get(command_id) if command_id else None
        )
        hops = times.hops(HOPS + TOTALS) if times is not None else []
        if hops:
            self.stdout.write("")
            self.stdout.write(
                format_table(("hop", "ms"), [(hop, f"{s * 1000:,.1f}") for hop, s in hops])
            )
