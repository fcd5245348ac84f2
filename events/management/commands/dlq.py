"""Operators' view of the dead-letter table: list, show one, replay one."""

from __future__ import annotations

import getpass
import json
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from events.models import EventDeadLetter
from events.selectors import dead_letter_get, dead_letters_list
from events.services import DeadLetterNotFound, DeadLetterNotReplayable, dead_letter_replay
from events.states import DeadLetterStatus

COLUMNS = ("id", "status", "created", "type", "handler", "reason", "attempts", "key")


class Command(BaseCommand):
    help = "Dead-lettered domain events: `list`, `show <id>`, `replay <id>`."

    def add_arguments(self, parser: CommandParser) -> None:
        sub = parser.add_subparsers(dest="action", required=True)
        listing = sub.add_parser("list", help="a table of dead letters, newest first")
        listing.add_argument(
            "--status",
            choices=[*DeadLetterStatus.values, "all"],
            default=DeadLetterStatus.OPEN,
        )
        listing.add_argument("--type", dest="event_type", default=None)
        listing.add_argument("--limit", type=int, default=50)
        show = sub.add_parser("show", help="one dead letter with its envelope and last error")
        show.add_argument("id", type=int)
        replay = sub.add_parser("replay", help="re-publish with the same idempotency key")
        replay.add_argument("id", type=int)
        replay.add_argument("--by", default=None, help="who replays (default: the OS user)")

    def handle(self, *args: Any, **options: Any) -> None:
        action = options["action"]
        if action == "list":
            status = None if options["status"] == "all" else options["status"]
            rows = dead_letters_list(
                status=status, event_type=options["event_type"], limit=options["limit"]
            )
            self._table(rows)
        elif action == "show":
            self._show(options["id"])
        else:
            self._replay(options["id"], options["by"] or getpass.getuser())

    def _table(self, rows: list[EventDeadLetter]) -> None:
        cells = [
            (
                str(r.pk),
                r.status,
                r.created_at.strftime("%Y-%m-%d %H:%M:%S"),
                r.event_type,
                r.handler,
                r.reason,
                str(r.attempts),
                r.idempotency_key,
            )
            for r in rows
        ]
        widths = [max(len(c[i]) for c in [COLUMNS, *cells]) for i in range(len(COLUMNS))]
        for line in [COLUMNS, *cells]:
            self.stdout.write("  ".join(v.ljust(w) for v, w in zip(line, widths, strict=True)))
        self.stdout.write(f"({len(cells)} dead letter{'s' if len(cells) != 1 else ''})")

    def _show(self, dead_letter_id: int) -> None:
        dead = dead_letter_get(dead_letter_id=dead_letter_id)
        if dead is None:
            raise CommandError(f"no dead letter {dead_letter_id}")
        replayed = (
            f"{dead.replayed_at:%Y-%m-%d %H:%M:%S} by {dead.replayed_by} "
            f"as event {dead.replay_event_id}"
            if dead.replayed_at
            else "no"
        )
        for label, value in [
            ("id", dead.pk),
            ("status", dead.status),
            ("type", dead.event_type),
            ("handler", dead.handler),
            ("reason", dead.reason),
            ("attempts", dead.attempts),
            ("idempotency key", dead.idempotency_key),
            ("created", f"{dead.created_at:%Y-%m-%d %H:%M:%S}"),
            ("replayed", replayed),
        ]:
            self.stdout.write(f"{label + ':':<17}{value}")
        self.stdout.write("envelope:")
        self.stdout.write(json.dumps(dead.envelope, indent=2, sort_keys=True))
        self.stdout.write("last error:")
        self.stdout.write(dead.last_error)

    def _replay(self, dead_letter_id: int, actor: str) -> None:
        try:
            envelope = dead_letter_replay(dead_letter_id=dead_letter_id, actor=actor)
        except (DeadLetterNotFound, DeadLetterNotReplayable) as exc:
            raise CommandError(str(exc)) from exc
        if envelope is None:
            raise CommandError(f"dead letter {dead_letter_id} was already replayed")
        dead = dead_letter_get(dead_letter_id=dead_letter_id)
        if dead is None or dead.status != DeadLetterStatus.REPLAYED:
            raise CommandError(
                f"dead letter {dead_letter_id}: the replay could not be published "
                "(see EVENT_PUBLISH_FAILED); it stays open"
            )
        self.stdout.write(
            f"replayed dead letter {dead_letter_id} as event {envelope.event_id} "
            f"(key {envelope.idempotency_key}) by {actor}"
        )
