"""Print what support looks at first in an incident: commands retrying, commands uncertain
and the devices with the most ack timeouts over a window (docs/spec.md §9)."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from django.core.management.base import BaseCommand, CommandParser
from django.utils import timezone

from automation.diagnostics import (
    commands_retrying,
    commands_uncertain,
    decisions_suppressed,
    devices_top_timeouts,
    targets_cooling_down,
)
from config.tables import format_table
from devices.display import endpoint_value_text


def _t(value: datetime | None) -> str:
    return "" if value is None else value.strftime("%Y-%m-%d %H:%M:%S")


class Command(BaseCommand):
    help = "Commands retrying and uncertain, and devices with the most timeouts."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--window-hours", type=float, default=24.0)
        parser.add_argument("--limit", type=int, default=20)

    def handle(self, *args: Any, **options: Any) -> None:
        limit = max(1, options["limit"])
        since = timezone.now() - timedelta(hours=options["window_hours"])
        retrying = commands_retrying(limit=limit)
        self.stdout.write(f"Commands retrying ({len(retrying)})")
        self.stdout.write(
            format_table(
                ("command", "commandId", "device", "attempt", "next attempt", "reason", "error"),
                [
                    (
                        str(i.pk),  # an id, not a count: no thousands separator
                        i.device_command_id or "",
                        i.target_serial_number,
                        f"{i.attempt_count}/{i.max_attempts}",
                        _t(i.next_attempt_at),
                        i.status_reason,
                        i.last_error[:60],
                    )
                    for i in retrying
                ],
            )
        )
        uncertain = commands_uncertain(since=since, limit=limit)
        self.stdout.write(f"\nCommands uncertain since {_t(since)} ({len(uncertain)})")
        self.stdout.write(
            format_table(
                ("command", "commandId", "device", "target", "reason", "finished"),
                [
                    (
                        str(i.pk),
                        i.device_command_id or "",
                        i.target_serial_number,
                        endpoint_value_text(
                            i.target_value, i.target_device_endpoint.profile_endpoint
                        ),
                        i.status_reason,
                        _t(i.finished_at),
                    )
                    for i in uncertain
                ],
            )
        )
        top = devices_top_timeouts(since=since, limit=limit)
        self.stdout.write(f"\nDevices with the most ack timeouts since {_t(since)}")
        self.stdout.write(
            format_table(
                ("device", "serial", "timeouts", "commands", "last timeout"),
                [
                    (
                        "" if d.device_id is None else str(d.device_id),
                        d.serial_number,
                        d.timeouts,
                        d.commands,
                        _t(d.last_at),
                    )
                    for d in top
                ],
            )
        )
        self._cooling(since, limit)

    def _cooling(self, since: datetime, limit: int) -> None:
        now = timezone.now()
        cooling = targets_cooling_down(now=now, since=since, limit=limit)
        suppressed = decisions_suppressed(since=since)
        self.stdout.write(
            f"\nCool-downs: {len(cooling)} target(s) cooling down, "
            f"{suppressed} decision(s) suppressed since {_t(since)}"
        )
        self.stdout.write(
            format_table(
                ("device", "endpoint", "value", "failures", "until", "reason", "command", "held"),
                [
                    (
                        c.serial_number,
                        c.endpoint_key,
                        endpoint_value_text(
                            c.cooldown.target_value,
                            c.cooldown.target_device_endpoint.profile_endpoint,
                        ),
                        c.cooldown.failures,
                        _t(c.cooldown.until),
                        c.cooldown.reason_code,
                        "" if c.cooldown.command_id is None else str(c.cooldown.command_id),
                        c.suppressed,
                    )
                    for c in cooling
                ],
            )
        )
