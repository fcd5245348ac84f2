"""``manage.py webhook_secret_issue <contact id>``: a new webhook signing secret for an
external contact, printed once (it is not stored, so it cannot be shown again); the previous
secret stops signing at once. ``--revoke`` removes the secret instead."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from notifications.services.contacts import (
    ExternalContactNotFound,
    external_contact_webhook_secret_issue,
    external_contact_webhook_secret_revoke,
)


class Command(BaseCommand):
    help = "Issue (rotate) or revoke an external contact's webhook signing secret."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("contact_id", type=int)
        parser.add_argument("--revoke", action="store_true", help="remove the secret")

    def handle(self, *args: Any, contact_id: int, revoke: bool, **options: Any) -> None:
        if revoke:
            done = external_contact_webhook_secret_revoke(contact_id=contact_id)
            self.stdout.write(f"contact {contact_id}: {'revoked' if done else 'had no secret'}")
            return
        try:
            secret = external_contact_webhook_secret_issue(contact_id=contact_id)
        except ExternalContactNotFound as exc:
            raise CommandError(str(exc)) from None
        self.stdout.write(secret)
        self.stderr.write(
            f"contact {contact_id}: give this secret to the receiver now; it is not stored "
            "and cannot be shown again"
        )
