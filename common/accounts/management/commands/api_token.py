"""``manage.py api_token <username>`` issues (or rotates) a user's API token and prints the
key, once: only its digest is stored. ``--revoke`` removes it instead."""

from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError, CommandParser

from common.accounts.services import api_token_issue, api_token_revoke


class Command(BaseCommand):
    help = "Issue, rotate or revoke a user's API token; the key is printed once."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("username")
        parser.add_argument("--revoke", action="store_true", help="remove the user's token")

    def handle(self, *args: Any, **options: Any) -> None:
        model = get_user_model()
        try:
            user = model._default_manager.get_by_natural_key(options["username"])
        except model.DoesNotExist:
            raise CommandError(f"no user {options['username']!r}") from None
        if options["revoke"]:
            done = api_token_revoke(user=user)
            self.stdout.write("revoked" if done else "the user had no token")
            return
        issued = api_token_issue(user=user)
        self.stdout.write(issued.key)
        expiry = issued.token.expires_at
        self.stderr.write(
            f"token {issued.token.prefix}… for {user.get_username()}: shown once, "
            + (f"expires {expiry:%Y-%m-%d %H:%M} UTC" if expiry else "never expires")
        )
